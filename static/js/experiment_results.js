/* The experiment page's results: draws every chart from the "results-data" JSON
   (experiments.results.block.Results.chart_data), redraws them when a toggle changes, and
   fills the per-request table for the chosen level. Sorting and copying the tables is
   tables.js's. */
(function () {
  "use strict";

  // The verdict grid shows one metric at a time; without script every grid stays visible.
  function showGrid(metric) {
    document.querySelectorAll("[data-grid]").forEach((grid) => {
      grid.hidden = grid.dataset.grid !== metric;
    });
  }
  const gridToggle = document.querySelector('[data-toggle="grid"]');
  if (gridToggle) {
    showGrid(gridToggle.querySelector("button").dataset.value);
    gridToggle.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-value]");
      if (!button) return;
      gridToggle.querySelectorAll("button").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      showGrid(button.dataset.value);
    });
  }

  const source = document.getElementById("results-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  const arms = data.arms;
  const armById = new Map(arms.map((arm) => [arm.id, arm]));
  const speculative = arms.filter((arm) => arm.speculative);
  const compared = arms.filter((arm) => !arm.baseline);
  const levelLabels = data.levels.map(String);
  const cells = new Map(data.cells.map((cell) => [`${cell.arm}:${cell.level}`, cell]));
  const INK = window.specdashCharts.INK;
  const CONCURRENCY = "concurrent requests";
  const SPEEDUP = "speedup (× baseline)";

  Chart.defaults.plugins.legend.labels.boxWidth = 12;

  // ------------------------------------------------------------ chart helpers

  function armStyle(arm, dataset) {
    return {
      borderColor: arm.colour,
      backgroundColor: arm.colour,
      errorBarColor: arm.colour,
      errorBarWhiskerColor: arm.colour,
      errorBarWhiskerSize: 10,
      borderWidth: 2,
      pointRadius: 3,
      ...dataset,
    };
  }

  function options(title, xTitle, yTitle, extra = {}) {
    return {
      interaction: { mode: "nearest", intersect: false },
      plugins: { title: { display: true, text: title }, ...extra.plugins },
      scales: {
        x: { title: { display: true, text: xTitle }, offset: true, ...extra.x },
        y: { title: { display: true, text: yTitle }, beginAtZero: true, ...extra.y },
      },
    };
  }

  function draw(id, config) {
    const canvas = document.getElementById(id);
    return canvas ? new Chart(canvas, config) : null;
  }

  function onToggle(name, callback) {
    const group = document.querySelector(`[data-toggle="${name}"]`);
    if (!group) return;
    group.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-value]");
      if (!button) return;
      group.querySelectorAll("button").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      callback(button.dataset.value);
    });
  }

  // One line per arm over the concurrency levels: mean of the repetitions, min–max bars.
  function spreadDatasets(column, armList = arms) {
    return armList.map((arm) => {
      const points = [];
      // One entry per level, null where the arm has none (a level a break-even search did not run for
      // it): the error-bar line places points by their index among the labels, not by their x.
      for (const level of data.levels) {
        const value = cells.get(`${arm.id}:${level}`)?.[column];
        const measured = value && value[0] !== null;
        points.push(measured ? { x: String(level), y: value[0], yMin: value[1], yMax: value[2] } : { x: String(level), y: null });
      }
      return armStyle(arm, { label: arm.label, data: points });
    });
  }

  function spreadChart(id, title, yTitle, column, armList) {
    return draw(id, {
      type: "lineWithErrorBars",
      data: { labels: levelLabels, datasets: spreadDatasets(column, armList) },
      options: options(title, CONCURRENCY, yTitle),
    });
  }

  const parityLine = () => window.specdashCharts.parityLine("1.0× = baseline");

  // ------------------------------------------------------------ latency, throughput, chunks

  const LATENCY = [
    ["ttft", "TTFT"],
    ["tpot", "TPOT"],
    ["server_tpot", "Engine-timed TPOT"],
    ["e2e", "End-to-end latency"],
  ];
  const latencyCharts = LATENCY.map(([metric, name]) =>
    spreadChart(`chart-${metric}`, `${name}, p50`, "ms", `${metric}_p50_ms`),
  );
  onToggle("latency", (percentile) => {
    latencyCharts.forEach((chart, i) => {
      const [metric, name] = LATENCY[i];
      chart.data.datasets = spreadDatasets(`${metric}_${percentile}_ms`);
      chart.options.plugins.title.text = `${name}, ${percentile}`;
      chart.update();
    });
  });

  spreadChart("chart-output-throughput", "Output throughput", "output tokens / s", "output_throughput");
  spreadChart("chart-request-throughput", "Request throughput", "requests / s", "request_throughput");
  spreadChart("chart-goodput", "Goodput (every SLO met)", "requests / s", "goodput");
  spreadChart("chart-itl", "Raw inter-chunk latency, p50", "ms between chunks", "itl_p50_ms");
  spreadChart("chart-tokens-per-chunk", "Tokens per streamed chunk", "tokens / chunk", "tokens_per_chunk_mean");

  // ------------------------------------------------------------ speedup

  const SPEEDUP_NAMES = {
    server_tpot: "engine-timed TPOT",
    tpot: "TPOT (client)",
    e2e: "end-to-end latency",
    output_throughput: "output throughput",
  };

  // No error bar where there is no interval (fewer than two blocks): a zero-width bar would look exact.
  function speedupPoint(s) {
    const point = { x: String(s.level), y: s.point };
    return s.lo === null || s.hi === null ? point : { ...point, yMin: s.lo, yMax: s.hi };
  }

  function speedupDatasets(metric) {
    return compared.map((arm) =>
      armStyle(arm, {
        label: arm.replicate ? `${arm.label} (noise floor)` : arm.label,
        borderDash: arm.replicate ? [2, 3] : undefined,
        // One entry per level, null where the arm has no speedup (see spreadDatasets).
        data: data.levels.map((level) => {
          const s = data.speedups.find((p) => p.arm === arm.id && p.metric === metric && p.level === level && p.point !== null);
          return s ? speedupPoint(s) : { x: String(level), y: null };
        }),
      }),
    );
  }

  function breakEven(arm, metric) {
    return data.break_even.find((b) => b.arm === arm.id && b.metric === metric);
  }

  // A concurrency between two measured levels as a position on the category axis,
  // interpolated on a log scale as the break-even itself is.
  function levelPosition(level) {
    const levels = data.levels;
    for (let i = 0; i + 1 < levels.length; i++) {
      if (level >= levels[i] && level <= levels[i + 1]) {
        return i + Math.log(level / levels[i]) / Math.log(levels[i + 1] / levels[i]);
      }
    }
    return level < levels[0] ? 0 : levels.length - 1;
  }

  function equivalenceBand() {
    return {
      type: "box",
      yMin: 1 - data.margin,
      yMax: 1 + data.margin,
      backgroundColor: "rgba(0, 158, 115, 0.12)",
      borderWidth: 0,
      label: { display: true, content: `equivalent (1 ± ${Math.round(data.margin * 1000) / 10} %)`, position: "start", font: { size: 10 } },
    };
  }

  function speedupAnnotations(metric) {
    const annotations = { band: equivalenceBand(), parity: parityLine() };
    speculative.forEach((arm, i) => {
      const even = breakEven(arm, metric);
      if (even && even.state === "bracketed") {
        Object.assign(annotations, searchBracket(arm, even, i));
        return;
      }
      if (!even || even.state !== "crosses") return;
      const x = levelPosition(even.level);
      annotations[`break-even-${arm.id}`] = {
        type: "line",
        xMin: x,
        xMax: x,
        borderColor: arm.colour,
        borderWidth: 2,
        borderDash: [6, 4],
        label: {
          display: true,
          content: `break-even ≈ ${even.level.toFixed(1)}: ${arm.label}`,
          position: "end",
          yAdjust: 4 + i * 22,
          backgroundColor: arm.colour,
          color: "#ffffff",
          font: { size: 11 },
        },
      };
    });
    return annotations;
  }

  // A break-even search's answer: the bracket of neighbouring levels, settled faster below and not
  // faster above, shaded; a dashed line where the point estimates cross 1 inside it.
  function searchBracket(arm, even, i) {
    const marks = {
      [`search-bracket-${arm.id}`]: {
        type: "box",
        xMin: levelPosition(even.lo),
        xMax: levelPosition(even.hi),
        backgroundColor: "rgba(230, 159, 0, 0.10)",
        borderColor: arm.colour,
        borderWidth: 1,
        label: {
          display: true,
          content: `break-even between ${even.lo} and ${even.hi}: ${arm.label}`,
          position: { x: "center", y: "start" },
          yAdjust: 4 + i * 22,
          font: { size: 11 },
        },
      },
    };
    if (even.level !== null) {
      marks[`break-even-${arm.id}`] = {
        type: "line",
        xMin: levelPosition(even.level),
        xMax: levelPosition(even.level),
        borderColor: arm.colour,
        borderWidth: 2,
        borderDash: [6, 4],
      };
    }
    return marks;
  }

  function bound(value, beyond) {
    return value === null ? beyond : value.toFixed(1);
  }

  function breakEvenSentence(metric) {
    const parts = speculative.map((arm) => {
      const even = breakEven(arm, metric);
      if (!even) return `${arm.label}: not estimable`;
      // A break-even search's answer (experiments/analysis/search.py): its bracket, or where the range holds none.
      if (even.state === "bracketed") {
        const at = even.level === null ? "" : `, where the point estimates cross 1 at about ${even.level.toFixed(1)}`;
        return `${arm.label}: between ${even.lo} and ${even.hi} concurrent requests (the search's bracket: settled faster at ${even.lo}, not faster at ${even.hi}${at})`;
      }
      if (even.reason && !["not estimable", "not settled", "crosses"].includes(even.state)) return `${arm.label}: ${even.reason}`;
      // An analysis stored before the states needed intervals has no reason: its state as it was.
      if (!("reason" in even) && even.state !== "crosses") return `${arm.label}: ${even.state}`;
      const reason = even.reason ? ` (${even.reason})` : "";
      if (even.state === "not estimable") return `${arm.label}: not estimable${reason}`;
      if (even.state === "not settled") return `${arm.label}: not settled, no level called slower above one called faster${reason}`;
      if (even.state === "pays at every measured level") return `${arm.label}: pays at every measured level (faster at each)`;
      if (even.state === "pays at no measured level") return `${arm.label}: pays at no measured level (slower at each)`;
      if (even.state !== "crosses") return `${arm.label}: ${even.state}`;
      const lo = bound(even.lo, `below ${data.levels[0]}`);
      const hi = bound(even.hi, `above ${data.levels[data.levels.length - 1]}`);
      return `${arm.label}: the speedup falls to 1 at about ${even.level.toFixed(1)} concurrent requests (95% interval ${lo} to ${hi})`;
    });
    return `Break-even for ${SPEEDUP_NAMES[metric]} — ${parts.join("; ")}.`;
  }

  const speedupChart = draw("chart-speedup", {
    type: "lineWithErrorBars",
    data: { labels: levelLabels, datasets: speedupDatasets("server_tpot") },
    options: options("Speedup of engine-timed TPOT over the baseline (95% interval over blocks)", CONCURRENCY, SPEEDUP, {
      y: { beginAtZero: false, grace: "5%" },
      plugins: { annotation: { annotations: speedupAnnotations("server_tpot") } },
    }),
  });
  const breakEvenText = document.getElementById("break-even");
  if (speedupChart) {
    breakEvenText.textContent = breakEvenSentence("server_tpot");
    onToggle("speedup", (metric) => {
      speedupChart.data.datasets = speedupDatasets(metric);
      speedupChart.options.plugins.title.text = `Speedup of ${SPEEDUP_NAMES[metric]} over the baseline (95% interval over blocks)`;
      speedupChart.options.plugins.annotation.annotations = speedupAnnotations(metric);
      speedupChart.update();
      breakEvenText.textContent = breakEvenSentence(metric);
    });
  }

  // ------------------------------------------------------------ acceptance by position and along the output

  const positions = Math.max(0, ...data.acceptance.map((a) => a.unconditional.length));
  const positionLabels = Array.from({ length: positions }, (_, i) => String(i));

  function positionChart(id, title, key) {
    return draw(id, {
      type: "bar",
      data: {
        labels: positionLabels,
        datasets: data.acceptance.map((a) =>
          armStyle(armById.get(a.arm), { label: armById.get(a.arm).label, data: a[key] }),
        ),
      },
      options: options(title, "draft position i", "acceptance", { y: { max: 1 } }),
    });
  }

  positionChart(
    "chart-acceptance-unconditional",
    "Unconditional: accepted at i / drafts (vLLM's figure)",
    "unconditional",
  );
  positionChart("chart-acceptance-conditional", "Conditional: accepted at i / accepted at i − 1", "conditional");

  draw("chart-along-output", {
    type: "line",
    data: {
      datasets: arms
        .filter((arm) => !arm.replicate && data.along_output[String(arm.id)])
        .map((arm) =>
          armStyle(arm, {
            label: arm.label,
            data: data.along_output[String(arm.id)].map(([start, mean, steps]) => ({ x: start, y: mean, steps })),
          }),
        ),
    },
    options: options("Tokens per decode step along the output", "output token index", "tokens / step", {
      x: { type: "linear", offset: false },
      plugins: {
        tooltip: {
          callbacks: {
            label: (item) => `${item.dataset.label}: ${item.parsed.y.toFixed(2)} (${item.raw.steps} steps)`,
          },
        },
      },
    }),
  });

  // ------------------------------------------------------------ per-request CDFs

  function cdfDatasets(series, armList, level) {
    return armList
      .filter((arm) => series[`${arm.id}:${level}`])
      .map((arm) => {
        const values = series[`${arm.id}:${level}`];
        const step = 100 / Math.max(1, values.length - 1);
        return armStyle(arm, { label: arm.label, pointRadius: 0, data: values.map((v, i) => ({ x: v, y: i * step })) });
      });
  }

  function cdfOptions(title, xTitle) {
    return options(title, xTitle, "requests at or below (%)", {
      x: { type: "linear", offset: false, beginAtZero: false },
      y: { max: 100 },
    });
  }

  const firstLevel = data.levels[0];
  const tpotCdf = draw("chart-tpot-cdf", {
    type: "line",
    data: { datasets: cdfDatasets(data.tpot_cdf, arms, firstLevel) },
    options: cdfOptions(`Per-request TPOT at ${firstLevel}`, "TPOT (ms)"),
  });
  const tauCdf = draw("chart-tau-cdf", {
    type: "line",
    data: { datasets: cdfDatasets(data.acceptance_length_cdf, speculative, firstLevel) },
    options: cdfOptions(`Per-request acceptance length τ at ${firstLevel}`, "τ (tokens per verify step)"),
  });

  function cell(tag, text, value) {
    const element = document.createElement(tag);
    element.textContent = text;
    if (tag === "td") element.className = "num";
    if (value !== undefined) element.dataset.value = value === null ? "" : String(value);
    return element;
  }

  function cdfTable(level) {
    const table = document.getElementById("table-cdf");
    if (!table) return;
    const columns = [
      ...arms.map((arm) => [`TPOT ms · ${arm.label}`, data.tpot_cdf[`${arm.id}:${level}`]]),
      ...speculative.map((arm) => [`τ · ${arm.label}`, data.acceptance_length_cdf[`${arm.id}:${level}`]]),
    ].filter(([, values]) => values && values.length);
    const rows = Math.max(0, ...columns.map(([, values]) => values.length));
    const head = document.createElement("thead");
    const headRow = head.insertRow();
    headRow.append(cell("th", "Requests at or below (%)"), ...columns.map(([label]) => cell("th", label)));
    const body = document.createElement("tbody");
    for (let i = 0; i < rows; i++) {
      const row = body.insertRow();
      const quantile = (i * 100) / Math.max(1, rows - 1);
      row.append(cell("td", quantile.toFixed(0), quantile));
      columns.forEach(([, values]) => {
        row.append(cell("td", values[i] === undefined ? "–" : values[i].toFixed(3), values[i]));
      });
    }
    table.querySelectorAll("thead, tbody").forEach((part) => part.remove());
    table.append(head, body);
    tables.makeSortable(table);
  }

  cdfTable(firstLevel);
  onToggle("cdf", (value) => {
    const level = Number(value);
    tpotCdf.data.datasets = cdfDatasets(data.tpot_cdf, arms, level);
    tpotCdf.options.plugins.title.text = `Per-request TPOT at ${level}`;
    tpotCdf.update();
    tauCdf.data.datasets = cdfDatasets(data.acceptance_length_cdf, speculative, level);
    tauCdf.options.plugins.title.text = `Per-request acceptance length τ at ${level}`;
    tauCdf.update();
    cdfTable(level);
  });

  // ------------------------------------------------------------ predicted against measured

  function predictedDatasets() {
    return speculative
      .filter((arm) => (data.predicted[String(arm.id)]?.points ?? []).some((p) => p.predicted !== null))
      .flatMap((arm) => {
        const points = data.predicted[String(arm.id)].points;
        const at = (key) => data.levels.map((level) => points.find((p) => p.level === level)?.[key] ?? null);
        return [
          armStyle(arm, { label: `${arm.label} measured`, data: at("measured"), pointStyle: "circle" }),
          armStyle(arm, {
            label: `${arm.label} predicted`,
            data: at("predicted"),
            borderDash: [6, 4],
            pointStyle: "triangle",
            pointRadius: 4,
          }),
        ];
      });
  }

  draw("chart-predicted", {
    type: "line",
    data: { labels: levelLabels, datasets: predictedDatasets() },
    options: options("TPOT speedup: predicted from the measured draft cost, and measured", CONCURRENCY, SPEEDUP, {
      y: { beginAtZero: false, grace: "5%" },
      plugins: {
        annotation: { annotations: { parity: parityLine() } },
        legend: { labels: { usePointStyle: true, boxHeight: 8 } },
      },
    }),
  });

  // ------------------------------------------------------------ block ratios by host (issue 38)

  // Colour is the host, the point's shape the arm: a host whose blocks sit apart shows as one colour apart.
  const HOST_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];
  const ARM_SHAPES = ["circle", "triangle", "rect", "rectRot", "star", "crossRot"];
  const hostRows = data.host_blocks ?? [];
  const hostNames = [...new Set(hostRows.flatMap((row) => row.points.map((p) => p.host)))].sort();
  const hostColour = (host) => (host ? HOST_COLOURS[hostNames.indexOf(host) % HOST_COLOURS.length] : INK);
  const hostDatasets = hostRows.flatMap((row, i) =>
    hostNames.map((host) => ({
      label: `${row.arm}${row.replicate ? " (A/A)" : ""} on ${host || "unrecorded host"}`,
      data: row.points.filter((p) => p.host === host).map((p) => ({ x: p.block, y: p.ratio })),
      borderColor: hostColour(host),
      backgroundColor: hostColour(host),
      pointStyle: ARM_SHAPES[i % ARM_SHAPES.length],
      pointRadius: 5,
    })),
  ).filter((dataset) => dataset.data.length);
  if (hostDatasets.length) {
    draw("chart-host-blocks", {
      type: "scatter",
      data: { datasets: hostDatasets },
      options: options("Block ratios by host (geometric mean over the levels)", "block (place in completion order)", SPEEDUP, {
        x: { ticks: { stepSize: 1 } },
        y: { beginAtZero: false, grace: "5%" },
        plugins: {
          annotation: { annotations: { parity: parityLine() } },
          legend: { labels: { usePointStyle: true, boxHeight: 8 } },
        },
      }),
    });
  }
})();
