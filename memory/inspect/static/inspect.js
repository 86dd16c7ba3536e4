// The inspector's little JavaScript: a turn's detail in the side panel, the live runtime page.
// Every text shown comes from the server already escaped, or is set with textContent.
"use strict";

function openTurn(link) {
  const panel = document.getElementById("panel");
  if (!panel) return true;
  fetch(link.getAttribute("href") + "?part=1", { headers: { "Accept": "text/html" } })
    .then((answer) => answer.text())
    .then((text) => {
      panel.innerHTML = text;  // the server escaped every text in it
      document.querySelectorAll(".dag .turn.selected").forEach((el) => el.classList.remove("selected"));
      link.classList.add("selected");
    })
    .catch((error) => { panel.textContent = "could not load the turn: " + error; });
  return false;
}

function wireSession() {
  const graph = document.getElementById("graph");
  if (!graph) return;
  graph.addEventListener("click", (event) => {
    const link = event.target.closest("a.turn");
    if (link && !openTurn(link)) event.preventDefault();
  });
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}

function drawTree(body, node, depth) {
  const row = document.createElement("tr");
  cell(row, "\u00a0\u00a0".repeat(depth) + node.id);
  cell(row, node.kind); cell(row, node.state);
  cell(row, String(node.mailbox), "num"); cell(row, String(node.restarts), "num");
  body.appendChild(row);
  node.children.forEach((child) => drawTree(body, child, depth + 1));
}

function line(svg, points, cls) {
  const path = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  path.setAttribute("points", points.map((p) => p.join(",")).join(" "));
  path.setAttribute("class", cls);
  svg.appendChild(path);
}

function drawChart(svg, samples) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const width = 720, height = 180, pad = 24;
  const axis = document.createElementNS("http://www.w3.org/2000/svg", "line");
  axis.setAttribute("x1", pad); axis.setAttribute("x2", width - 4);
  axis.setAttribute("y1", height - pad); axis.setAttribute("y2", height - pad);
  axis.setAttribute("class", "axis"); svg.appendChild(axis);
  if (samples.length < 2) return;
  const rates = samples.map((s, i) => i === 0 ? 0 :
    Math.max(0, (s.marked_turns - samples[i - 1].marked_turns) / Math.max(1e-3, s.at - samples[i - 1].at)));
  const top = Math.max(1, ...samples.map((s) => s.lag), ...rates);
  const x = (i) => pad + (i * (width - pad - 4)) / (samples.length - 1);
  const y = (v) => height - pad - (v / top) * (height - 2 * pad);
  line(svg, samples.map((s, i) => [x(i), y(s.lag)]), "lag");
  line(svg, rates.map((r, i) => [x(i), y(r)]), "rate");
  const label = document.createElementNS("http://www.w3.org/2000/svg", "text");
  label.setAttribute("x", 2); label.setAttribute("y", 12);
  label.textContent = "max " + top.toFixed(1);
  svg.appendChild(label);
}

function poll(live) {
  fetch(live.dataset.source).then((answer) => answer.json()).then((doc) => {
    const last = doc.samples[doc.samples.length - 1];
    if (last) {
      ["in_flight", "sessions_active", "written_jobs", "marked_turns", "lag", "quarantined"]
        .forEach((key) => { document.getElementById(key).textContent = String(last[key]); });
    }
    drawChart(document.getElementById("chart"), doc.samples);
    const tree = document.querySelector("#tree tbody");
    tree.replaceChildren();
    if (doc.tree) drawTree(tree, doc.tree, 0);
    const cycles = document.querySelector("#cycles tbody");
    cycles.replaceChildren();
    doc.cycles.slice(0, 20).forEach((c) => {
      const row = document.createElement("tr");
      cell(row, new Date(c.at * 1000).toISOString()); cell(row, c.session || "");
      cell(row, c.result || ""); cell(row, c.seconds == null ? "" : Number(c.seconds).toFixed(3), "num");
      cell(row, (c.node_ids || []).join(" "));
      cycles.appendChild(row);
    });
  }).catch(() => {}).finally(() => setTimeout(() => poll(live), 1000));
}

document.addEventListener("DOMContentLoaded", () => {
  wireSession();
  const live = document.getElementById("live");
  if (live) poll(live);
});
