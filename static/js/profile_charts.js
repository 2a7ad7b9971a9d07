/* The experiment page's profile and capacity charts, drawn from the "profile-data" JSON
   (experiments.results.step_profiles.chart_data): the step time split by the profiled shares per
   arm and level, the verification share against concurrency, and the capacity figures
   beside the baseline's. */
(function () {
  "use strict";

  const source = document.getElementById("profile-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  if (!data) return;
  const armById = new Map(data.arms.map((arm) => [arm.id, arm]));
  const baseline = data.arms.find((arm) => arm.baseline);
  // Okabe–Ito: orange, blue, bluish green, grey.
  const PHASE_STYLE = {
    proposing: ["Proposing", "#E69F00"],
    verifying: ["Verifying", "#0072B2"],
    sampling: ["Sampling", "#009E73"],
    other: ["Other", "#9a9a9a"],
  };
  const CONCURRENCY = "concurrent requests";

  function draw(id, config) {
    const canvas = document.getElementById(id);
    return canvas ? new Chart(canvas, config) : null;
  }

  function title(text) {
    return { display: true, text };
  }

  function cellLabel(row) {
    return `${armById.get(row.arm)?.label ?? row.arm} @ ${row.level}`;
  }

  // ------------------------------------------------------------ step time, stacked

  const timed = data.profiles.filter((row) => row.phase_ms);
  draw("chart-step-time", {
    type: "bar",
    data: {
      labels: timed.map(cellLabel),
      datasets: data.phases.map((phase) => ({
        label: PHASE_STYLE[phase][0],
        backgroundColor: PHASE_STYLE[phase][1],
        data: timed.map((row) => row.phase_ms[phase]),
      })),
    },
    options: {
      plugins: {
        title: title("Step time split by the profiled shares"),
        tooltip: { callbacks: { label: (item) => `${item.dataset.label}: ${item.parsed.y.toFixed(2)} ms` } },
      },
      scales: {
        x: { stacked: true, title: { display: true, text: "arm @ concurrency" } },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: "ms per step" } },
      },
    },
  });

  // ------------------------------------------------------------ verification share

  const levels = [...new Set(data.profiles.map((row) => row.level))].sort((a, b) => a - b);
  const profiled = data.arms.filter((arm) => data.profiles.some((row) => row.arm === arm.id && row.shares));
  draw("chart-verify-share", {
    type: "line",
    data: {
      labels: levels.map(String),
      datasets: profiled.map((arm) => ({
        label: arm.label,
        borderColor: arm.colour,
        backgroundColor: arm.colour,
        borderWidth: 2,
        pointRadius: 3,
        data: data.profiles
          .filter((row) => row.arm === arm.id && row.shares)
          .map((row) => ({ x: String(row.level), y: 100 * row.shares.verifying })),
      })),
    },
    options: {
      plugins: { title: title("Verifying, share of the profiled time") },
      scales: {
        x: { title: { display: true, text: CONCURRENCY }, offset: true },
        y: { beginAtZero: true, max: 100, title: { display: true, text: "% of profiled time" } },
      },
    },
  });

  // ------------------------------------------------------------ capacity beside the baseline

  const capacity = data.capacity;
  const baselineLabel = baseline ? baseline.label : "baseline";
  draw("chart-capacity", {
    data: {
      labels: capacity.map(cellLabel),
      datasets: [
        { type: "bar", label: "Peak KV cache (%)", backgroundColor: "#0072B2", yAxisID: "y", data: capacity.map((r) => r.kv_peak) },
        {
          type: "bar",
          label: `Peak KV cache (%), ${baselineLabel}`,
          backgroundColor: "#9a9a9a",
          yAxisID: "y",
          data: capacity.map((r) => r.baseline_kv_peak),
        },
        {
          type: "line",
          label: "Preemptions",
          showLine: false,
          pointRadius: 6,
          pointStyle: "rectRot",
          borderColor: "#D55E00",
          backgroundColor: "#D55E00",
          yAxisID: "y2",
          data: capacity.map((r) => r.preemptions),
        },
        {
          type: "line",
          label: `Preemptions, ${baselineLabel}`,
          showLine: false,
          pointRadius: 6,
          pointStyle: "triangle",
          borderColor: window.specdashCharts.INK,
          backgroundColor: window.specdashCharts.INK,
          yAxisID: "y2",
          data: capacity.map((r) => r.baseline_preemptions),
        },
      ],
    },
    options: {
      plugins: { title: title("Peak KV cache and preemptions, beside the baseline") },
      scales: {
        x: { title: { display: true, text: "arm @ concurrency" } },
        y: { beginAtZero: true, max: 100, title: { display: true, text: "peak KV cache (%)" } },
        y2: {
          beginAtZero: true,
          position: "right",
          grid: { drawOnChartArea: false },
          ticks: { precision: 0 },
          title: { display: true, text: "preemptions" },
        },
      },
    },
  });
})();
