// The experiment form: add and remove speculative arms (a Django formset), show only the
// fields that the chosen arm method and workload use (hidden fields keep their values), and
// warn when the worker queue typed has no live worker, and count the servers a synthetic
// acceptance sweep adds.
(function () {
  "use strict";

  const form = document.getElementById("experiment-form");
  if (!form) return;
  document.documentElement.classList.add("js");

  const prefix = form.dataset.armsPrefix;
  const armList = document.getElementById("arm-list");
  const template = document.getElementById("arm-template");
  const addButton = document.getElementById("add-arm");
  const totalForms = form.querySelector(`input[name="${prefix}-TOTAL_FORMS"]`);
  const maxForms = Number(form.querySelector(`input[name="${prefix}-MAX_NUM_FORMS"]`).value);

  function visibleArms() {
    return armList.querySelectorAll("[data-arm]:not([hidden])");
  }

  function showMethodFields(arm) {
    const method = arm.querySelector("select[name$='-method']").value;
    arm.querySelectorAll("[data-methods]").forEach((field) => {
      field.hidden = !field.dataset.methods.split(" ").includes(method);
    });
  }

  function updateAddButton() {
    addButton.disabled = visibleArms().length >= maxForms;
  }

  function addArm() {
    const index = Number(totalForms.value);
    armList.insertAdjacentHTML("beforeend", template.innerHTML.replace(/__prefix__/g, String(index)));
    totalForms.value = String(index + 1);
    const arm = armList.lastElementChild;
    showMethodFields(arm);
    updateAddButton();
    arm.querySelector("select").focus();
    planChanged();
  }

  // Every row is unsaved, but ticking DELETE (instead of removing the row) keeps the
  // formset's numbering intact; the server ignores deleted rows.
  function removeArm(arm) {
    arm.querySelector("input[name$='-DELETE']").checked = true;
    arm.hidden = true;
    updateAddButton();
    planChanged();
  }

  // The cost estimate (templates/experiments/partials/cost_estimate.html) follows the form's input
  // events; adding or removing an arm changes the plan without one.
  function planChanged() {
    form.dispatchEvent(new Event("input"));
  }

  function showWorkloadFields() {
    const checked = form.querySelector("input[name='workload_kind']:checked");
    const kind = checked ? checked.value : "";
    form.querySelectorAll("[data-workload]").forEach((field) => {
      field.hidden = !field.dataset.workload.split(" ").includes(kind);
    });
  }

  // A queue no live worker listens on is accepted (the experiment waits): say so before it is sent.
  const queueInput = form.querySelector("input[name='worker_queue']");
  const queueNote = document.getElementById("queue-not-live");

  function showQueueNote() {
    const live = Array.from(document.querySelectorAll("#live-queues option"), (option) => option.value);
    const queue = queueInput.value.trim();
    const readable = document.getElementById("live-queues-note").dataset.readable === "true";
    queueNote.querySelector("[data-queue-name]").textContent = queue;
    queueNote.hidden = !readable || !queue || live.includes(queue);
  }

  // A synthetic acceptance sweep starts servers of its own: say how many before the form is sent.
  function numbers(name) {
    const input = form.querySelector(`[name='${name}']`);
    return input ? input.value.split(/[,;\s]+/).filter(Boolean).length : 0;
  }

  function showSweepCost(arm) {
    const note = arm.querySelector("[data-sweep-cost]");
    const lengths = arm.querySelector("input[name$='-synthetic_sweep']").value.split(/[,;]/).filter((item) => item.trim());
    const blocks = Number(form.querySelector("[name='repetitions']").value) || 1;
    const perBlock = form.querySelector("[name='server_per_block']").checked;
    const servers = lengths.length * (perBlock ? blocks : 1);
    const runs = lengths.length * numbers("concurrency_levels") * blocks;
    note.textContent = `This sweep adds ${runs} synthetic run${runs === 1 ? "" : "s"} on ${servers} more vLLM server start${servers === 1 ? "" : "s"}.`;
    note.hidden = lengths.length === 0;
    // The live workers said what they compute on (experiments/execution/worker_queues.py): on a queue
    // that only CPU workers serve, the sweep's runs will fail (vLLM's CPU build refuses it).
    const queue = queueInput.value.trim();
    const cpuOnly = Array.from(document.querySelectorAll("#live-queues option[data-cpu-only]"), (option) => option.value);
    const warning = arm.querySelector("[data-sweep-cpu-only]");
    warning.querySelector("[data-queue-name]").textContent = queue;
    warning.hidden = lengths.length === 0 || !cpuOnly.includes(queue);
  }

  function showSweepCosts() {
    armList.querySelectorAll("[data-arm]").forEach(showSweepCost);
  }

  form.addEventListener("input", showSweepCosts);
  form.addEventListener("change", showSweepCosts);
  addButton.addEventListener("click", addArm);
  queueInput.addEventListener("input", showQueueNote);
  armList.addEventListener("click", (event) => {
    const button = event.target.closest(".arm-remove");
    if (button) removeArm(button.closest("[data-arm]"));
  });
  armList.addEventListener("change", (event) => {
    if (event.target.matches("select[name$='-method']")) showMethodFields(event.target.closest("[data-arm]"));
  });
  form.querySelectorAll("input[name='workload_kind']").forEach((radio) => {
    radio.addEventListener("change", showWorkloadFields);
  });

  armList.querySelectorAll("[data-arm]").forEach(showMethodFields);
  showWorkloadFields();
  showQueueNote();
  showSweepCosts();
  updateAddButton();
})();
