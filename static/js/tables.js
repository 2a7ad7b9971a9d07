/* Tables on any page: a table.data sorts by the column whose heading is clicked (or given
   Enter or Space), and a button[data-copy] puts the table with that id on the clipboard as
   tab-separated values. A cell's data-value is its sort key and copied value (full
   precision where the cell shows a rounded figure); data-tsv, when set, is copied instead
   (a cell that stands for several columns). tables.makeSortable is for a table built after
   the page loaded. */
window.tables = (function () {
  "use strict";

  function sortKey(row, index) {
    const target = row.cells[index];
    return target.dataset.value ?? target.textContent.trim();
  }

  function compareKeys(a, b) {
    if (a === "" || b === "") return (a === "") - (b === "");
    const x = Number(a);
    const y = Number(b);
    return Number.isNaN(x) || Number.isNaN(y) ? a.localeCompare(b) : x - y;
  }

  function sortBy(header) {
    const table = header.closest("table");
    const index = Array.from(header.parentNode.children).indexOf(header);
    const ascending = header.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th[aria-sort]").forEach((h) => h.removeAttribute("aria-sort"));
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((r1, r2) => {
      const a = sortKey(r1, index);
      const b = sortKey(r2, index);
      if (a === "" || b === "") return compareKeys(a, b); // missing values last either way
      return ascending ? compareKeys(a, b) : compareKeys(b, a);
    });
    body.append(...rows);
  }

  function makeSortable(table) {
    table.querySelectorAll("thead th").forEach((header) => {
      header.tabIndex = 0;
      header.title = "Sort by this column";
    });
  }

  // A spreadsheet runs a pasted cell that starts with one of these as a formula (an arm
  // labelled =HYPERLINK(...)): such text is quoted, numbers such as -1.5 are left alone.
  function spreadsheetSafe(value) {
    return /^[=+\-@\r]/.test(value) && Number.isNaN(Number(value)) ? "'" + value : value;
  }

  function tableTsv(table) {
    const raw = (c) => c.dataset.tsv ?? c.dataset.value ?? c.textContent.trim();
    const text = (c) => raw(c).split("\t").map(spreadsheetSafe).join("\t");
    return Array.from(table.rows, (row) => Array.from(row.cells, text).join("\t")).join("\n") + "\n";
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // No clipboard API outside a secure context: the old way.
      const area = document.createElement("textarea");
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
  }

  async function copy(button) {
    await copyText(tableTsv(document.getElementById(button.dataset.copy)));
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = "Copy"), 1500);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.documentElement.classList.add("js"); // shows the "Copy" buttons
    document.querySelectorAll("table.data").forEach(makeSortable);
  });
  document.addEventListener("click", (event) => {
    const header = event.target.closest("table.data thead th");
    if (header) sortBy(header);
    const button = event.target.closest("button[data-copy]");
    if (button) copy(button);
  });
  document.addEventListener("keydown", (event) => {
    const header = event.target.closest("table.data thead th");
    if (header && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      sortBy(header);
    }
  });

  return { makeSortable };
})();
