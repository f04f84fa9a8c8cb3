// Playground: a prompt streamed over the WebSocket GET /v1/ws (docs/websocket.md). A browser cannot set
// headers on a WebSocket, so the first message carries the admin key ({"type": "auth", "api_key"}); each
// answer arrives as {"id", "token"} frames and ends with one {"id", "done"} or {"id", "error"} frame.
// Shown to the roles that may explain a route (trying prompts against the routing is theirs, not a
// tenant-admin's), and only to a key: a single sign-on session has none to give the socket.
(() => {
  const { $ } = SY;
  let ready = null; // a promise of the authenticated socket, while one is open
  let socket = null;
  let openId = null; // the request whose frames are arriving
  let nextId = 1;

  function url() {
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
  }

  function setState(text, busy) {
    $("play-state").textContent = text;
    $("play-send").disabled = busy;
    $("play-cancel").disabled = !busy;
  }

  function finish(state) {
    openId = null;
    setState(state, false);
  }

  function onFrame(frame) {
    if (frame.id === undefined || frame.id !== openId) {
      if (frame.error) SY.showError("play-error", frame.error.message); // about the connection itself
      return;
    }
    if (frame.token !== undefined) {
      $("play-output").textContent += frame.token;
    } else if (frame.error) {
      SY.showError("play-error", `${frame.error.message} (${frame.status || "stream"})`);
      finish("failed");
    } else if (frame.done && frame.cancelled) {
      finish("cancelled");
    } else if (frame.done) {
      const usage = frame.usage;
      const tokens = usage ? `${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens` : "no usage";
      $("play-meta").textContent = `finish_reason ${frame.finish_reason} · ${tokens} · request ${frame.request_id}`;
      finish("done");
    }
  }

  function connect() {
    if (ready) return ready;
    ready = new Promise((resolve, reject) => {
      let authenticated = false;
      const ws = new WebSocket(url());
      ws.onopen = () => ws.send(JSON.stringify({ type: "auth", api_key: SY.key() }));
      ws.onmessage = (message) => {
        const frame = JSON.parse(message.data);
        if (frame.authenticated) {
          authenticated = true;
          socket = ws;
          resolve(ws);
        } else {
          onFrame(frame);
        }
      };
      ws.onclose = (event) => {
        socket = null;
        ready = null;
        const why = `The WebSocket closed (${event.code}${event.reason ? ": " + event.reason : ""}).`;
        if (!authenticated) reject(new Error(why));
        if (openId !== null) {
          SY.showError("play-error", why);
          finish("failed");
        }
      };
    });
    return ready;
  }

  async function loadModels() {
    if ($("play-model").options.length) return;
    try {
      const models = await SY.api("GET", "/v1/models");
      const names = models.data.map((m) => m.id);
      $("play-model").replaceChildren(...names.map((name) => SY.el("option", { value: name, text: name })));
    } catch (error) {
      SY.showError("play-error", error);
    }
  }

  async function send(event) {
    event.preventDefault();
    SY.clearError("play-error");
    $("play-output").textContent = "";
    $("play-meta").textContent = "";
    const id = nextId++;
    openId = id;
    setState("connecting", true);
    let ws;
    try {
      ws = await connect();
    } catch (error) {
      SY.showError("play-error", error);
      finish("failed");
      return;
    }
    setState("streaming", true);
    const request = { id, model: $("play-model").value, prompt: $("play-prompt").value };
    const maxTokens = parseInt($("play-max-tokens").value, 10);
    if (maxTokens > 0) request.max_tokens = maxTokens;
    ws.send(JSON.stringify(request));
  }

  $("play-form").addEventListener("submit", send);
  $("play-cancel").addEventListener("click", () => {
    if (socket && openId !== null) socket.send(JSON.stringify({ type: "cancel", id: openId }));
  });

  SY.tab("playground", {
    needs: "route.explain",
    needsKey: true, // the WebSocket takes an API key in its first message, never a session cookie
    show: loadModels,
    hide() {
      if (socket) socket.close(1000, "tab closed"); // a request still open is cancelled by the gateway
    },
    reset() {
      if (socket) socket.close(1000, "signed out");
      $("play-output").textContent = "";
      $("play-meta").textContent = "";
      $("play-model").replaceChildren(); // the next key may use other models
    },
  });
})();
