// Usage: GET /v1/usage for a month, per tenant, key and pool, with a bar chart of spend, tokens or
// requests per tenant drawn as inline SVG (tokens stacked: input, then output).
(() => {
  const { $, el, svg } = SY;
  const BAR_WIDTH = 520;
  const LABEL = 140;
  const ROW = 26;
  let report = null;

  function thisMonth() {
    const now = new Date();
    return `${now.getUTCFullYear()}-${String(now.getUTCMonth() + 1).padStart(2, "0")}`;
  }

  function parts(total, metric) {
    if (metric === "tokens") return [total.input_tokens, total.output_tokens];
    return [metric === "cost_usd" ? total.cost_usd : total.requests];
  }

  function label(total, metric) {
    if (metric === "cost_usd") return SY.usd(total.cost_usd);
    if (metric === "tokens") return `${SY.number(total.input_tokens)} in + ${SY.number(total.output_tokens)} out`;
    return SY.number(total.requests) + " requests";
  }

  function chart(tenants, metric) {
    const names = Object.keys(tenants).sort();
    if (!names.length) return el("p", { class: "muted", id: "usage-empty", text: "No usage this month." });
    const largest = Math.max(1e-9, ...names.map((n) => parts(tenants[n].total, metric).reduce((a, b) => a + b, 0)));
    const image = svg("svg", {
      id: "usage-svg",
      width: LABEL + BAR_WIDTH + 200,
      height: names.length * ROW + 6,
      role: "img",
      "aria-label": "usage per tenant",
    });
    names.forEach((name, i) => {
      const y = i * ROW + 3;
      const total = tenants[name].total;
      const group = svg("g", { class: "tenant", "data-tenant": name });
      group.append(svg("text", { x: 0, y: y + 15 }, name));
      let x = LABEL;
      parts(total, metric).forEach((value, j) => {
        const width = Math.round((value / largest) * BAR_WIDTH);
        group.append(svg("rect", { class: j ? "bar alt" : "bar", x, y, width: Math.max(1, width), height: ROW - 8 }));
        x += width;
      });
      group.append(svg("text", { class: "value", x: x + 8, y: y + 15 }, label(total, metric)));
      image.append(group);
    });
    image.append(svg("line", { class: "axis", x1: LABEL, y1: 0, x2: LABEL, y2: names.length * ROW + 6 }));
    return image;
  }

  function line(tenant, what, totals, isTotal) {
    return el(
      "tr",
      { class: isTotal ? "total" : null, "data-tenant": tenant },
      el("td", {}, isTotal ? el("strong", { text: tenant }) : ""),
      el("td", { text: what }),
      el("td", { class: "num", text: SY.number(totals.requests) }),
      el("td", { class: "num", text: SY.number(totals.input_tokens) }),
      el("td", { class: "num", text: SY.number(totals.output_tokens) }),
      el("td", { class: "num", text: SY.usd(totals.cost_usd) }),
    );
  }

  function rows(tenants) {
    const out = [];
    for (const name of Object.keys(tenants).sort()) {
      const usage = tenants[name];
      out.push(line(name, "total", usage.total, true));
      for (const [key, totals] of Object.entries(usage.keys)) out.push(line(name, "key " + key, totals, false));
      for (const [pool, totals] of Object.entries(usage.pools)) out.push(line(name, "pool " + pool, totals, false));
    }
    return out;
  }

  function render() {
    if (!report) return;
    $("usage-chart").replaceChildren(chart(report.tenants, $("usage-metric").value));
    $("usage-table").tBodies[0].replaceChildren(...rows(report.tenants));
  }

  async function refresh() {
    const month = $("usage-month").value || thisMonth();
    try {
      report = await SY.api("GET", "/v1/usage?month=" + encodeURIComponent(month));
      SY.clearError("usage-error");
      render();
    } catch (error) {
      SY.showError("usage-error", error);
    }
  }

  $("usage-month").value = thisMonth();
  $("usage-form").addEventListener("submit", (event) => {
    event.preventDefault();
    refresh();
  });
  $("usage-metric").addEventListener("change", render);
  SY.tab("usage", {
    needs: "usage.read",
    show: refresh,
    reset() {
      report = null;
      $("usage-chart").replaceChildren();
      $("usage-table").tBodies[0].replaceChildren();
    },
  });
})();
