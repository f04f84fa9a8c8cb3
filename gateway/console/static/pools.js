// Pools: every pool and replica from GET /v1/admin/pools, polled every 2 s while the tab is open; for a
// role that may drain (gateway.drain), a toggle that takes this gateway process out of its load
// balancer (POST /v1/admin/drain: /readyz fails, requests keep being served) and back (DELETE).
(() => {
  const { $, el } = SY;
  const INTERVAL_MS = 2000;
  let timer = null;
  let current = 0;
  let draining = false;

  function health(replica) {
    return replica.healthy
      ? el("span", { class: "badge ok", text: "healthy" })
      : el("span", { class: "badge bad", text: "down" });
  }

  function breaker(replica) {
    const label = replica.breaker.replace("_", "-") + (replica.breaker_opened_by_probe ? " (probes)" : "");
    return el("span", { class: "state-" + replica.breaker, text: label });
  }

  function loadText(replica) {
    let text = String(replica.load);
    if (replica.scraped) {
      const kv = Math.round(replica.scraped.kv_cache_usage * 100);
      text += ` (running ${replica.scraped.running}, waiting ${replica.scraped.waiting}, KV ${kv}%)`;
    }
    return text;
  }

  function row(replica) {
    const latency = replica.latency;
    return el(
      "tr",
      { "data-replica": replica.label },
      el("td", { class: "label", title: replica.base_url, text: replica.label }),
      el("td", { text: replica.model }),
      el("td", { class: "health" }, health(replica)),
      el("td", { class: "breaker" }, breaker(replica)),
      el("td", { class: "num outstanding", text: replica.outstanding }),
      el("td", { class: "num load", text: loadText(replica) }),
      el("td", { class: "num p50", text: SY.ms(latency.p50_ms) }),
      el("td", { class: "num p95", text: SY.ms(latency.p95_ms) }),
      el("td", { class: "num samples", text: latency.num_samples }),
      el("td", { class: "num", text: `${SY.number(replica.num_successes)} / ${SY.number(replica.num_failures)}` }),
    );
  }

  function pool(view) {
    const facts = [view.strategy];
    if (view.fallbacks.length) facts.push("fallbacks: " + view.fallbacks.join(" -> "));
    const up = view.replicas.filter((r) => r.healthy).length;
    facts.push(`${up}/${view.replicas.length} healthy`);
    return el(
      "div",
      { class: "pool", "data-pool": view.name },
      el(
        "h3",
        {},
        el("span", { class: "pool-name", text: view.name }),
        " ",
        el("span", { class: "muted", text: facts.join(" · ") }),
        view.saturated ? el("span", { class: "badge warn", text: "saturated" }) : null,
      ),
      view.description ? el("p", { class: "muted", text: view.description }) : null,
      el(
        "table",
        { class: "replicas" },
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ...["replica", "model", "health", "breaker"].map((h) => el("th", { text: h })),
            ...["in flight", "load", "p50", "p95", "samples", "ok / failed"].map((h) =>
              el("th", { class: "num", text: h }),
            ),
          ),
        ),
        el("tbody", {}, ...view.replicas.map(row)),
      ),
    );
  }

  async function refresh() {
    if (document.hidden) return;
    try {
      const view = await SY.api("GET", "/v1/admin/pools");
      $("pools-list").replaceChildren(...view.data.map(pool));
      $("pools-updated").textContent = SY.clock(view.as_of);
      $("pools-live").classList.remove("stale");
      SY.clearError("pools-error");
    } catch (error) {
      $("pools-live").classList.add("stale");
      SY.showError("pools-error", error);
    }
  }

  // The next poll starts when this one has finished: a slow gateway never gets overlapping calls; a
  // loop that outlived a hide (its call still out) ends when it sees a newer generation.
  async function loop(generation) {
    await refresh();
    if (generation === current) timer = setTimeout(() => loop(generation), INTERVAL_MS);
  }

  function showDrain(answer) {
    draining = answer.draining;
    $("drain-toggle").textContent = draining ? "Resume" : "Drain this gateway";
    $("drain-toggle").classList.toggle("danger", !draining);
    let state = draining ? "Draining: out of the load balancer, still serving" : "Serving";
    if (answer.in_flight !== undefined) state += ` · ${SY.number(answer.in_flight)} in flight`;
    if (answer.process) state += ` · process ${answer.process}`;
    $("drain-state").textContent = state;
  }

  // The state before any toggle: /readyz (open, no key) answers "draining" while this gateway drains.
  // The toggle waits for it, so an answer read before a press never overwrites the press's.
  async function readDrain() {
    $("drain-toggle").disabled = true;
    try {
      const response = await fetch("/readyz", { cache: "no-store" });
      const body = await response.json();
      showDrain({ draining: body.status === "draining" });
    } catch (error) {
      $("drain-state").textContent = "state unknown";
    } finally {
      $("drain-toggle").disabled = false;
    }
  }

  async function toggleDrain() {
    $("drain-toggle").disabled = true;
    try {
      showDrain(await SY.api(draining ? "DELETE" : "POST", "/v1/admin/drain"));
      SY.clearError("drain-error");
    } catch (error) {
      SY.showError("drain-error", error);
    } finally {
      $("drain-toggle").disabled = false;
    }
  }

  $("drain-toggle").addEventListener("click", toggleDrain);
  SY.tab("pools", {
    needs: "pools.read",
    show() {
      $("drain").hidden = !SY.may("gateway.drain");
      if (SY.may("gateway.drain")) readDrain();
      current += 1;
      clearTimeout(timer);
      loop(current);
    },
    hide() {
      current += 1;
      clearTimeout(timer);
      timer = null;
    },
    reset() {
      $("pools-list").replaceChildren();
      $("drain").hidden = true;
      $("drain-state").textContent = "";
      SY.clearError("drain-error");
      draining = false;
    },
  });
})();
