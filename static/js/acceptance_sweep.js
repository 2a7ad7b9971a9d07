/* The experiment page's synthetic acceptance sweep: per arm, speedup over the baseline
   against the synthetic acceptance length, one line per concurrency level, with the
   break-even line at 1 and the arm's real τ marked (experiments/analysis/acceptance_sweep.py). */
(function () {
  "use strict";

  const source = document.getElementById("sweep-data");
  if (!source || typeof Chart === "undefined") return;
  const COLOURS = ["#0b6bcb", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0f766e", "#a16207", "#4338ca"];

  function levelDataset(row, index) {
    const colour = COLOURS[index % COLOURS.length];
    return {
      label: `${row.level} concurrent`,
      data: row.points,
      borderColor: colour,
      backgroundColor: colour,
      borderWidth: 2,
      pointRadius: 3,
      showLine: true,
    };
  }

  function annotations(sweep) {
    const marks = {
      breakEven: window.specdashCharts.parityLine("break-even (1×)", "start"),
    };
    if (sweep.tau !== null) {
      marks.tau = {
        type: "line",
        xMin: sweep.tau,
        xMax: sweep.tau,
        borderColor: "#b91c1c",
        borderWidth: 2,
        label: { display: true, content: `your draft: τ ${sweep.tau.toFixed(2)}`, position: "end" },
      };
    }
    return marks;
  }

  function draw(sweep) {
    const canvas = document.getElementById(`sweep-chart-${sweep.arm}`);
    if (!canvas) return;
    const lengths = sweep.lengths.concat(sweep.tau === null ? [] : [sweep.tau]);
    new Chart(canvas, {
      type: "scatter",
      data: { datasets: sweep.levels.map(levelDataset) },
      options: {
        interaction: { mode: "nearest", intersect: false },
        plugins: {
          title: { display: true, text: `${sweep.label}: speedup at each synthetic acceptance length (synthetic runs)` },
          annotation: { annotations: annotations(sweep) },
        },
        scales: {
          x: {
            title: { display: true, text: "synthetic mean acceptance length τ" },
            min: Math.min(1, ...lengths),
            max: Math.max(...lengths) + 0.25,
          },
          y: { title: { display: true, text: "speedup (× baseline output throughput)" }, beginAtZero: true },
        },
      },
    });
  }

  JSON.parse(source.textContent).forEach(draw);
})();
