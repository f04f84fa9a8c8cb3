// Route explain: POST /v1/admin/route/explain with a typed prompt; the pool, the reason and the
// classifier's probabilities per pool as bars.
(() => {
  const { $, svg } = SY;
  const WIDTH = 420;
  const ROW = 22;
  const LABEL = 90;

  function bars(probabilities, chosen) {
    const entries = Object.entries(probabilities || {});
    if (!entries.length) return null;
    const chart = svg("svg", {
      width: WIDTH + LABEL + 60,
      height: entries.length * ROW + 4,
      role: "img",
      "aria-label": "probability per pool",
    });
    entries.forEach(([name, p], i) => {
      const y = i * ROW + 2;
      chart.append(svg("text", { x: 0, y: y + 14 }, name));
      chart.append(
        svg("rect", {
          class: name === chosen ? "bar" : "bar alt",
          x: LABEL,
          y,
          height: ROW - 6,
          width: Math.max(1, Math.round(p * WIDTH)),
        }),
      );
      chart.append(svg("text", { x: LABEL + Math.round(p * WIDTH) + 6, y: y + 14 }, p.toFixed(3)));
    });
    return chart;
  }

  async function submit(event) {
    event.preventDefault();
    const body = {
      prompt: $("explain-prompt").value,
      tools: $("explain-tools").checked,
      json_mode: $("explain-json").checked,
    };
    const system = $("explain-system").value.trim();
    if (system) body.system = system;
    $("explain-button").disabled = true;
    try {
      const answer = await SY.api("POST", "/v1/admin/route/explain", body);
      $("explain-pool").textContent = answer.pool;
      $("explain-reason").textContent = answer.reason;
      $("explain-classifier").textContent = `${answer.classifier} (model "${answer.auto_model}")`;
      $("explain-latency").textContent = SY.ms(answer.latency_ms);
      const chart = bars(answer.probabilities, answer.pool);
      $("explain-probabilities").replaceChildren(...(chart ? [chart] : []));
      $("explain-result").hidden = false;
      SY.clearError("explain-error");
    } catch (error) {
      $("explain-result").hidden = true;
      SY.showError("explain-error", error);
    } finally {
      $("explain-button").disabled = false;
    }
  }

  $("explain-form").addEventListener("submit", submit);
  SY.tab("explain", {
    needs: "route.explain",
    reset() {
      $("explain-result").hidden = true;
    },
  });
})();
