// Keys: the key admin API (docs/keys.md). Lists every key, makes one (its secret shown once, in a box
// the admin dismisses), rotates and revokes the API's keys, and shows the newest audit entries. What the
// role may not do is not offered: no form nor buttons without keys.write, no audit without audit.read;
// a tenant-admin sees (the gateway answers) its own tenant's keys and makes keys in it only.
(() => {
  const { $, el } = SY;

  function scope(key) {
    const parts = [];
    if (key.pools.length) parts.push("pools: " + key.pools.join(", "));
    if (key.models.length) parts.push("models: " + key.models.join(", "));
    return parts.length ? parts.join("; ") : "every model";
  }

  function limits(key) {
    const parts = [];
    const l = key.limits || {};
    if (l.requests_per_minute !== null && l.requests_per_minute !== undefined) parts.push(l.requests_per_minute + " rpm");
    if (l.tokens_per_minute !== null && l.tokens_per_minute !== undefined) parts.push(l.tokens_per_minute + " tpm");
    if (l.max_concurrent !== null && l.max_concurrent !== undefined) parts.push(l.max_concurrent + " at once");
    if (key.budget) parts.push(SY.usd(key.budget.monthly_usd) + "/month");
    return parts.join(", ") || "-";
  }

  function showSecret(view) {
    $("key-secret-name").textContent = `(${view.name}, tenant ${view.tenant})`;
    $("key-secret-value").textContent = view.key;
    $("key-secret").hidden = false;
  }

  async function act(what, path, body) {
    try {
      const view = await SY.api("POST", path, body);
      if (view && view.key) showSecret(view);
      SY.clearError("keys-error");
    } catch (error) {
      SY.showError("keys-error", `${what}: ${error.message}`);
    }
    await refresh();
  }

  function actions(key) {
    if (key.source !== "api" || key.status !== "active" || !SY.may("keys.write")) return el("td", {});
    const name = encodeURIComponent(key.name);
    return el(
      "td",
      { class: "actions" },
      el("button", {
        type: "button",
        class: "rotate",
        text: "Rotate",
        onclick: () => {
          if (window.confirm(`Rotate the key ${key.name}? Its old secret keeps working for an hour.`)) {
            act("Rotate", `/v1/admin/keys/${name}/rotate`, {}); // the API's default grace_s, 3600
          }
        },
      }),
      " ",
      el("button", {
        type: "button",
        class: "revoke danger",
        text: "Revoke",
        onclick: () => {
          if (window.confirm(`Revoke the key ${key.name}? It stops working on every replica.`)) {
            act("Revoke", `/v1/admin/keys/${name}/revoke`);
          }
        },
      }),
    );
  }

  function row(key) {
    return el(
      "tr",
      { "data-key": key.name },
      el("td", { class: "name", text: key.name }),
      el("td", { text: key.tenant }),
      el("td", { text: key.source }),
      el("td", { class: "status", text: key.status + (key.admin ? " (admin)" : "") }),
      el("td", { text: scope(key) }),
      el("td", { text: limits(key) }),
      el("td", {}, el("code", { text: key.fingerprints.join(" ") })),
      actions(key),
    );
  }

  function auditRow(entry) {
    return el(
      "tr",
      {},
      el("td", { text: SY.clock(entry.at) }),
      el("td", { text: entry.actor }),
      el("td", { text: entry.action }),
      el("td", { text: entry.key }),
      el("td", { text: entry.tenant }),
    );
  }

  async function refresh() {
    const noAudit = Promise.resolve({ data: [] });
    try {
      const [keys, audit] = await Promise.all([
        SY.api("GET", "/v1/admin/keys"),
        SY.may("audit.read") ? SY.api("GET", "/v1/admin/audit?limit=20") : noAudit,
      ]);
      $("keys-table").tBodies[0].replaceChildren(...keys.data.map(row));
      $("audit-table").tBodies[0].replaceChildren(...audit.data.map(auditRow));
    } catch (error) {
      SY.showError("keys-error", error);
    }
  }

  function spec() {
    const body = { tenant: $("key-tenant").value.trim() };
    const name = $("key-name").value.trim();
    if (name) body.name = name;
    const models = $("key-models").value.split(",").map((m) => m.trim()).filter(Boolean);
    if (models.length) body.models = models;
    const rpm = $("key-rpm").value;
    if (rpm !== "") body.limits = { requests_per_minute: parseInt(rpm, 10) };
    const budget = $("key-budget").value;
    if (budget !== "") body.budget = { monthly_usd: parseFloat(budget) };
    if ($("key-admin").checked) body.admin = true;
    return body;
  }

  // The form as the role may use it: a tenant-admin's own tenant filled in (and fixed); the admin box
  // only for an admin (no other role may make an admin key).
  function fit() {
    const who = SY.who();
    const own = who !== null && who.role === "tenant-admin";
    $("key-form").hidden = !SY.may("keys.write");
    $("key-tenant").readOnly = own;
    if (own) $("key-tenant").value = who.tenant;
    $("key-admin-label").hidden = who === null || who.role !== "admin";
    $("audit-heading").hidden = !SY.may("audit.read");
    $("audit-table").hidden = !SY.may("audit.read");
  }

  $("key-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    await act("Create", "/v1/admin/keys", spec());
    if ($("keys-error").hidden) {
      $("key-form").reset();
      fit();
    }
  });
  function dismiss() {
    $("key-secret-value").textContent = "";
    $("key-secret").hidden = true;
  }

  $("key-secret-dismiss").addEventListener("click", dismiss);
  SY.tab("keys", {
    needs: "keys.read",
    show() {
      fit();
      refresh();
    },
    reset() {
      dismiss();
      $("key-form").reset();
      $("key-tenant").readOnly = false;
      $("keys-table").tBodies[0].replaceChildren();
      $("audit-table").tBodies[0].replaceChildren();
    },
  });
})();
