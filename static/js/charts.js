/* Chart.js settings shared by every page with charts: the page's font and ink, no
   animation, legends under the chart; and the parity line (a speedup of 1×) every speedup
   chart draws. Loaded (deferred) before the page's own script, which reads
   window.specdashCharts. */
(function () {
  "use strict";
  const INK = "#1f2328";

  // The line at a speedup of 1× (chartjs-plugin-annotation), labelled `content` at `position`.
  function parityLine(content, position = "end") {
    return {
      type: "line",
      yMin: 1,
      yMax: 1,
      borderColor: INK,
      borderWidth: 1.5,
      borderDash: [5, 4],
      label: {
        display: true,
        content,
        position,
        backgroundColor: "rgba(255, 255, 255, 0.85)",
        color: INK,
        font: { size: 11 },
      },
    };
  }

  window.specdashCharts = { INK, parityLine };
  if (typeof Chart === "undefined") return;
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  Chart.defaults.font.size = 12;
  Chart.defaults.color = INK;
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.plugins.legend.position = "bottom";
  Chart.defaults.plugins.title.font = { size: 13, weight: "600" };
})();
