/* The comparison page: the picked arms' speedups (each over its own experiment's baseline)
   and their absolute figures, overlaid from the "compare-data" JSON
   (experiments.review.comparison.Comparison.chart_data). A colour is an arm configuration, a dash
   pattern an experiment. The toggles switch the metric of a chart and show its table. */
(function () {
  "use strict";

  const source = document.getElementById("compare-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const labels = data.levels.map(String);
  const SPEEDUP_NAMES = { tpot: "TPOT", e2e: "end-to-end latency", output_throughput: "output throughput" };
  const ABSOLUTE_NAMES = {
    tpot_p50_ms: ["TPOT p50", "ms"],
    e2e_p50_ms: ["End-to-end latency p50", "ms"],
    output_throughput: ["Output throughput", "output tokens / s"],
  };

  Chart.defaults.plugins.legend.labels.boxWidth = 30;
  // A line sample in the legend, so that its dash tells the experiment.
  Chart.defaults.plugins.legend.labels.usePointStyle = true;
  Chart.defaults.plugins.legend.labels.pointStyle = "line";

  // The legend's line sample does not show the dash, so the label names it.
  function dataset(arm, points) {
    return {
      label: `${arm.label} (${arm.dash_name})`,
      data: points,
      borderColor: arm.colour,
      backgroundColor: arm.colour,
      errorBarColor: arm.colour,
      errorBarWhiskerColor: arm.colour,
      errorBarWhiskerSize: 8,
      borderDash: arm.dash,
      borderWidth: 2,
      pointRadius: 3,
    };
  }

  // No error bar where there is no interval: a zero-width bar would look exact.
  function point(level, y, lo, hi) {
    const p = { x: String(level), y };
    return lo === null || hi === null ? p : { ...p, yMin: lo, yMax: hi };
  }

  function speedupDatasets(metric) {
    return data.arms
      .filter((arm) => !arm.baseline)
      .map((arm) =>
        dataset(
          arm,
          data.speedups
            .filter((s) => s.arm === arm.id && s.metric === metric && s.point !== null)
            .sort((a, b) => a.level - b.level)
            .map((s) => point(s.level, s.point, s.lo, s.hi)),
        ),
      );
  }

  function absoluteDatasets(column) {
    return data.arms.map((arm) =>
      dataset(
        arm,
        data.absolute
          .filter((cell) => cell.arm === arm.id && cell[column][0] !== null)
          .sort((a, b) => a.level - b.level)
          .map((cell) => point(cell.level, ...cell[column])),
      ),
    );
  }

  function speedupTitle(metric) {
    return `Speedup of ${SPEEDUP_NAMES[metric]} over each experiment's own baseline (95% interval over blocks)`;
  }

  function absoluteTitle(column) {
    const where = data.hosts_differ ? " — from different hosts, not comparable as a speedup" : "";
    return `${ABSOLUTE_NAMES[column][0]}, mean over the runs (min–max)${where}`;
  }

  function chart(id, datasets, title, yTitle, extra = {}) {
    const canvas = document.getElementById(id);
    if (!canvas) return null;
    return new Chart(canvas, {
      type: "lineWithErrorBars",
      data: { labels, datasets },
      options: {
        interaction: { mode: "nearest", intersect: false },
        plugins: { title: { display: true, text: title }, ...extra.plugins },
        scales: {
          x: { title: { display: true, text: "concurrent requests" }, offset: true },
          y: { title: { display: true, text: yTitle }, ...extra.y },
        },
      },
    });
  }

  const parity = window.specdashCharts.parityLine("1.0× = own baseline");

  const charts = {
    speedup: chart("chart-compare-speedup", speedupDatasets("tpot"), speedupTitle("tpot"), "speedup (× own baseline)", {
      y: { grace: "5%" },
      plugins: { annotation: { annotations: { parity } } },
    }),
    absolute: chart(
      "chart-compare-absolute",
      absoluteDatasets("tpot_p50_ms"),
      absoluteTitle("tpot_p50_ms"),
      ABSOLUTE_NAMES.tpot_p50_ms[1],
      { y: { beginAtZero: true } },
    ),
  };

  const redraw = {
    speedup(metric) {
      charts.speedup.data.datasets = speedupDatasets(metric);
      charts.speedup.options.plugins.title.text = speedupTitle(metric);
    },
    absolute(column) {
      charts.absolute.data.datasets = absoluteDatasets(column);
      charts.absolute.options.plugins.title.text = absoluteTitle(column);
      charts.absolute.options.scales.y.title.text = ABSOLUTE_NAMES[column][1];
    },
  };

  function show(name, value) {
    document.querySelectorAll(`[data-table="${name}"]`).forEach((table) => {
      table.hidden = table.dataset.value !== value;
    });
    if (charts[name]) {
      redraw[name](value);
      charts[name].update();
    }
  }

  document.querySelectorAll("[data-toggle]").forEach((group) => {
    const name = group.dataset.toggle;
    show(name, group.querySelector("button").dataset.value);
    group.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-value]");
      if (!button) return;
      group.querySelectorAll("button").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      show(name, button.dataset.value);
    });
  });
})();
