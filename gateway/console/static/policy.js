// Policy: GET /v1/admin/policy, the serving policy (no key hashes, no URL credentials) and when it was
// loaded; for a role that may reload it (policy.reload), a button that has this gateway read its files
// again (POST /v1/admin/policy/reload) and says what changed, or why the new policy was refused.
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

  // "sections pools, routing; pools added extra, changed small", or "nothing changed".
  function changes(changed) {
    const parts = [];
    const sections = (changed && changed.sections) || [];
    if (sections.length) parts.push("sections " + sections.join(", "));
    const pools = (changed && changed.pools) || {};
    const moved = ["added", "removed", "changed"]
      .filter((how) => (pools[how] || []).length)
      .map((how) => `${how} ${pools[how].join(", ")}`);
    if (moved.length) parts.push("pools " + moved.join(", "));
    return parts.length ? parts.join("; ") : "nothing changed";
  }

  async function reload() {
    $("policy-reload").disabled = true;
    $("policy-reload-result").hidden = true;
    SY.clearError("policy-reload-error");
    try {
      const answer = await SY.api("POST", "/v1/admin/policy/reload");
      const what = answer.adopted ? "Adopted" : "Not adopted";
      $("policy-reload-result").textContent = `${what} (${answer.process}): ${changes(answer.changed)}.`;
      $("policy-reload-result").hidden = false;
    } catch (error) {
      SY.showError("policy-reload-error", error.code === "policy_invalid" ? `Refused: ${error.message}` : error);
    } finally {
      $("policy-reload").disabled = false;
    }
    await refresh();
  }

  function forget() {
    $("policy-reload-result").hidden = true;
    $("policy-reload-result").textContent = "";
    SY.clearError("policy-reload-error");
  }

  $("policy-refresh").addEventListener("click", refresh);
  $("policy-reload").addEventListener("click", reload);
  SY.tab("policy", {
    needs: "policy.read",
    show() {
      $("policy-reload").hidden = !SY.may("policy.reload");
      refresh();
    },
    reset() {
      forget();
      $("policy-reload").hidden = true;
      $("policy-json").textContent = "";
    },
  });
})();
