/* Chart.js settings shared by every page with charts: the page's font and ink, no
   animation, legends under the chart. Loaded (deferred) before the page's own script. */
(function () {
  "use strict";
  if (typeof Chart === "undefined") return;
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  Chart.defaults.font.size = 12;
  Chart.defaults.color = "#1f2328";
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.plugins.legend.position = "bottom";
  Chart.defaults.plugins.title.font = { size: 13, weight: "600" };
})();
