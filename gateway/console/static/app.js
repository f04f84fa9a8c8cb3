"use strict";
// The console's core: the admin key (kept in sessionStorage, sent as a Bearer token), who it signed in
// as (GET /v1/admin/whoami: a name, a tenant, a role and the actions the role may do), calls to the
// gateway, the tabs, and small DOM helpers. Data only ever reaches the page as text (textContent),
// never as markup. Each tab's script registers itself with SY.tab(name, {needs, needsKey, show, hide,
// reset}): needs, the action its role must have for the tab to be shown at all; needsKey, true when it
// works with an API key only (not a single sign-on session); show and hide as it is opened and left,
// reset (forget what it shows) at sign-out.
const SY = (() => {
  const KEY_NAME = "sortyard.adminKey";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const tabs = {};
  let current = null;
  let signedIn = false;
  let principal = null; // {name, tenant, role, actions} while signed in

  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  class ApiError extends Error {
    constructor(status, message, code) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  const key = () => sessionStorage.getItem(KEY_NAME);
  // single sign-on: the session cookie is HttpOnly; its CSRF token (readable) goes back in a header
  const csrf = () => (document.cookie.match(/(?:^|; )[^=]*_csrf=([^;]*)/) || [])[1];

  // One call to the gateway; an answer that is not 2xx throws its OpenAI-shaped error's message.
  async function api(method, path, body) {
    const headers = key() ? { Authorization: "Bearer " + key() } : {};
    if (csrf()) headers["x-csrf-token"] = csrf();
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiError(0, "The gateway did not answer (" + error.message + ").", null);
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = null;
    }
    if (!response.ok) {
      const detail = data && data.error ? data.error : { message: "HTTP " + response.status };
      if (response.status === 401 && signedIn) signOut("The gateway refused the key: " + detail.message);
      throw new ApiError(response.status, detail.message, detail.code || null);
    }
    return data;
  }

  function showError(id, error) {
    const node = $(id);
    node.textContent = error instanceof Error ? error.message : String(error);
    node.hidden = false;
  }

  function clearError(id) {
    $(id).hidden = true;
    $(id).textContent = "";
  }

  const pad = (n) => String(n).padStart(2, "0");

  // Unix seconds -> "2026-12-01 14:03:07" in the browser's time zone.
  function clock(unix) {
    if (unix === null || unix === undefined) return "-";
    const d = new Date(unix * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function ago(seconds) {
    if (seconds < 60) return Math.max(0, Math.round(seconds)) + " s ago";
    if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
    if (seconds < 86400) return Math.round(seconds / 3600) + " h ago";
    return Math.round(seconds / 86400) + " d ago";
  }

  const number = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
  const ms = (n) => (n === null || n === undefined ? "-" : Number(n).toFixed(1) + " ms");
  const usd = (n) => "$" + Number(n || 0).toFixed(n >= 100 ? 2 : 4);

  function tab(name, handlers) {
    tabs[name] = handlers;
  }

  // May the signed-in principal do this action? (The gateway checks again on every call.)
  const may = (action) => principal !== null && principal.actions.includes(action);

  function usable(name) {
    const handlers = tabs[name];
    return Boolean(handlers) && may(handlers.needs) && (!handlers.needsKey || key() !== null);
  }

  function whoText(who) {
    const role = who.role === "tenant-admin" ? `tenant-admin (${who.tenant})` : who.role;
    return `${who.name} · ${role}`;
  }

  function select(name) {
    if (current && tabs[current] && tabs[current].hide) tabs[current].hide();
    current = name;
    for (const button of document.querySelectorAll("#tabs button")) {
      button.classList.toggle("active", button.dataset.tab === name);
    }
    for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== "tab-" + name;
    if (tabs[name] && tabs[name].show) tabs[name].show();
  }

  // Signed in as who (whoami's answer): only the tabs its role may use, the first of them open.
  function enter(who) {
    signedIn = true;
    principal = { name: who.name, tenant: who.tenant, role: who.role, actions: who.actions || [] };
    $("session-label").textContent = whoText(principal);
    const shown = [];
    for (const button of document.querySelectorAll("#tabs button")) {
      button.hidden = !usable(button.dataset.tab);
      if (!button.hidden) shown.push(button.dataset.tab);
    }
    $("signin").hidden = true;
    $("session").hidden = false;
    $("tabs").hidden = false;
    $("panels").hidden = false;
    clearError("signin-error");
    if (shown.length) select(shown.includes(current) ? current : shown[0]);
    else showError("signin-error", `The role ${principal.role} may use none of the console's tabs.`);
  }

  function signOut(reason) {
    signedIn = false;
    if (current && tabs[current] && tabs[current].hide) tabs[current].hide();
    for (const handlers of Object.values(tabs)) if (handlers.reset) handlers.reset();
    principal = null;
    current = null;
    $("session-label").textContent = "";
    for (const panel of document.querySelectorAll(".panel")) panel.hidden = true;
    for (const node of document.querySelectorAll(".panel .error")) clearError(node.id); // not the next one's
    sessionStorage.removeItem(KEY_NAME);
    if (csrf()) fetch("/console/logout", { method: "POST", headers: { "x-csrf-token": csrf() } });
    $("signin").hidden = false;
    $("session").hidden = true;
    $("tabs").hidden = true;
    $("panels").hidden = true;
    if (reason) showError("signin-error", reason);
  }

  // A key is kept only once the gateway has taken it as a key with a role (any of them).
  async function signIn(candidate) {
    sessionStorage.setItem(KEY_NAME, candidate);
    let who;
    try {
      who = await api("GET", "/v1/admin/whoami");
    } catch (error) {
      sessionStorage.removeItem(KEY_NAME);
      showError("signin-error", error);
      return;
    }
    enter(who);
  }

  function start() {
    $("signin").addEventListener("submit", (event) => {
      event.preventDefault();
      const candidate = $("admin-key").value.trim();
      $("admin-key").value = "";
      if (candidate) signIn(candidate);
    });
    $("signout").addEventListener("click", () => signOut(null));
    for (const button of document.querySelectorAll("#tabs button")) {
      button.addEventListener("click", () => select(button.dataset.tab));
    }
    if (key()) signIn(key());
    else if (csrf()) api("GET", "/v1/admin/whoami").then(enter, () => {}); // a single sign-on session
  }

  const who = () => principal;

  return { $, el, svg, api, key, who, may, tab, showError, clearError, clock, ago, number, ms, usd, start };
})();
