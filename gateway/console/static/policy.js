// Policy: GET /v1/admin/policy, the serving policy (no key hashes, no URL credentials) and when it was
// loaded.
(() => {
  const { $ } = SY;

  async function refresh() {
    try {
      const view = await SY.api("GET", "/v1/admin/policy");
      const age = Date.now() / 1000 - view.loaded_at;
      $("policy-loaded").textContent = `${SY.clock(view.loaded_at)} (${SY.ago(age)})`;
      $("policy-source").textContent = view.source + (view.overlay ? ` + overlay ${view.overlay}` : "");
      $("policy-reloads").textContent = `${view.num_reloads} adopted, ${view.num_refused} refused since start`;
      $("policy-last-error").textContent = view.last_error || "none";
      $("policy-json").textContent = JSON.stringify(view.policy, null, 2);
      SY.clearError("policy-error");
    } catch (error) {
      SY.showError("policy-error", error);
    }
  }

  $("policy-refresh").addEventListener("click", refresh);
  SY.tab("policy", {
    show: refresh,
    reset() {
      $("policy-json").textContent = "";
    },
  });
})();
