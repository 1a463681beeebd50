// weir dashboard: polls /api/jobs and the selected job's /api/jobs/NAME once a second; rates
// are differences between two polls. No libraries: it is served from the binary, offline.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
let selected = null;
// Previous counters by key ("job:NAME", "stage:NAME:i"), for rates.
const previous = new Map();

function $(id) { return document.getElementById(id); }

function rate(key, value, nowMs) {
  const before = previous.get(key);
  previous.set(key, { value, at: nowMs });
  if (!before || nowMs <= before.at || value == null) return null;
  return Math.max(0, (value - before.value) * 1000 / (nowMs - before.at));
}

function fmtRate(r) {
  if (r == null) return "–";
  if (r >= 1e6) return (r / 1e6).toFixed(2) + " M";
  if (r >= 1e3) return (r / 1e3).toFixed(1) + " k";
  return r.toFixed(0);
}

function fmtBytes(b) {
  if (b == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b : b.toFixed(1)) + " " + units[i];
}

function fmtDuration(ms) {
  if (ms == null) return "–";
  if (ms < 1000) return ms.toFixed(0) + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 7200000) return (ms / 60000).toFixed(1) + " min";
  return (ms / 3600000).toFixed(1) + " h";
}

function fmtTime(ms) {
  if (ms == null) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
}

function renderJobs(data) {
  const body = document.querySelector("#jobs tbody");
  body.textContent = "";
  $("no-jobs").hidden = data.jobs.length > 0;
  for (const job of data.jobs) {
    const tr = document.createElement("tr");
    tr.dataset.job = job.name;
    if (job.name === selected) tr.classList.add("selected");
    const rin = rate("job-in:" + job.name, job.rows_in, data.now_ms);
    const rout = rate("job-out:" + job.name, job.rows_out, data.now_ms);
    cell(tr, job.name);
    cell(tr, job.state, "state-" + job.state);
    cell(tr, fmtRate(rin), "num rate-in");
    cell(tr, fmtRate(rout), "num rate-out");
    cell(tr, job.watermark || "–");
    const lag = job.watermark_ms != null && job.newest_event_time_ms != null
      ? job.newest_event_time_ms - job.watermark_ms : null;
    cell(tr, lag == null ? "–" : fmtDuration(lag), "num");
    cell(tr, String(job.late_rows), "num");
    const cp = job.checkpoint;
    cell(tr, cp ? String(cp.last_epoch) : "–", "num");
    cell(tr, String(job.restarts), "num");
    tr.addEventListener("click", () => { selected = job.name; poll(); });
    body.appendChild(tr);
  }
  if (selected == null && data.jobs.length > 0) selected = data.jobs[0].name;
}

// Columns of the graph: a stage's depth is one more than its deepest input's.
function layout(stages) {
  const depth = [];
  for (const s of stages) {
    depth[s.index] = s.inputs.length === 0 ? 0 : 1 + Math.max(...s.inputs.map(i => depth[i.from] || 0));
  }
  const columns = [];
  stages.forEach(s => { (columns[depth[s.index]] = columns[depth[s.index]] || []).push(s.index); });
  return { depth, columns };
}

function renderGraph(job, nowMs) {
  const svg = $("graph");
  svg.textContent = "";
  const defs = el("defs");
  const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
  marker.appendChild(el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#94a3b8" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const W = 230, H = 96, GX = 90, GY = 24, PAD = 16;
  const { columns } = layout(job.stages);
  const pos = [];
  columns.forEach((col, c) => col.forEach((idx, r) => {
    pos[idx] = { x: PAD + c * (W + GX), y: PAD + r * (H + GY) };
  }));
  const rows = Math.max(1, ...columns.map(c => c.length));
  svg.setAttribute("width", PAD * 2 + columns.length * W + (columns.length - 1) * GX);
  svg.setAttribute("height", PAD * 2 + rows * H + (rows - 1) * GY);
  for (const s of job.stages) {
    for (const input of s.inputs) {
      const a = pos[input.from], b = pos[s.index];
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      svg.appendChild(el("path", { class: "edge", d: `M ${x1} ${y1} C ${x1 + GX / 2} ${y1}, ${x2 - GX / 2} ${y2}, ${x2} ${y2}` }));
      const how = input.partitioning.startsWith("hash") ? "hash" : input.partitioning;
      svg.appendChild(el("text", { class: "edge-label", x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 6, "text-anchor": "middle" }, how));
    }
  }
  for (const s of job.stages) {
    const p = pos[s.index];
    const g = el("g", { class: "stage", "data-stage": s.index, transform: `translate(${p.x},${p.y})` });
    g.appendChild(el("rect", { width: W, height: H }));
    const title = el("text", { class: "title", x: 10, y: 18 }, `${s.name} ×${s.parallelism}`);
    const tip = el("title", {}, s.operators.join("\n"));
    g.appendChild(tip);
    g.appendChild(title);
    const rin = rate(`stage-in:${job.name}:${s.index}`, s.rows_in, nowMs);
    const rout = rate(`stage-out:${job.name}:${s.index}`, s.rows_out, nowMs);
    g.appendChild(el("text", { class: "stage-rate", x: 10, y: 38 }, `in ${fmtRate(rin)}/s · out ${fmtRate(rout)}/s`));
    g.appendChild(el("text", { x: 10, y: 56 }, `wm ${s.watermark_ms == null ? "–" : fmtTime(s.watermark_ms)}`));
    const capacity = (s.queue_capacity || 0) * Math.max(1, s.inputs.length) * s.parallelism;
    if (capacity > 0) {
      const fill = Math.min(1, (s.queued || 0) / capacity);
      g.appendChild(el("text", { x: 10, y: 80 }, "queue"));
      g.appendChild(el("rect", { class: "queue-bg", x: 56, y: 71, width: W - 70, height: 10 }));
      g.appendChild(el("rect", { class: "queue", x: 56, y: 71, width: (W - 70) * fill, height: 10 }));
    }
    svg.appendChild(g);
  }
}

function renderCheckpoints(history) {
  const svg = $("checkpoint-chart");
  svg.textContent = "";
  const W = Math.max(400, history.length * 8 + 80), H = 160, L = 56, B = 24, T = 10;
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  if (history.length === 0) {
    svg.appendChild(el("text", { x: 12, y: 24, class: "axis" }, "no checkpoint yet"));
    return;
  }
  const maxMs = Math.max(1, ...history.map(h => h.duration_ms));
  const maxBytes = Math.max(1, ...history.map(h => h.bytes));
  const step = (W - L - 10) / history.length;
  history.forEach((h, i) => {
    const bh = (H - B - T) * h.duration_ms / maxMs;
    const bar = el("rect", { class: "bar", x: L + i * step, y: H - B - bh, width: Math.max(1, step - 2), height: bh });
    bar.appendChild(el("title", {}, `epoch ${h.epoch}: ${h.duration_ms.toFixed(1)} ms, ${fmtBytes(h.bytes)}`));
    svg.appendChild(bar);
  });
  const points = history.map((h, i) => `${L + i * step + step / 2},${H - B - (H - B - T) * h.bytes / maxBytes}`);
  svg.appendChild(el("polyline", { class: "size", points: points.join(" ") }));
  svg.appendChild(el("text", { class: "axis", x: 4, y: T + 10 }, fmtDuration(maxMs)));
  svg.appendChild(el("text", { class: "axis", x: 4, y: H - B }, "0 ms"));
  svg.appendChild(el("text", { class: "axis", x: L, y: H - 6 }, `epoch ${history[0].epoch}`));
  svg.appendChild(el("text", { class: "axis", x: W - 10, y: H - 6, "text-anchor": "end" }, `epoch ${history[history.length - 1].epoch} · max size ${fmtBytes(maxBytes)}`));
}

function renderDetail(job, nowMs) {
  $("detail").hidden = false;
  $("detail-name").textContent = job.name;
  $("detail-state").textContent = job.state;
  $("detail-error").hidden = !job.error;
  $("detail-error").textContent = job.error || "";
  $("rate-in").textContent = fmtRate(rate("detail-in:" + job.name, job.rows_in, nowMs));
  $("rate-out").textContent = fmtRate(rate("detail-out:" + job.name, job.rows_out, nowMs));
  $("watermark").textContent = job.watermark || "–";
  $("late-rows").textContent = String(job.late_rows);
  const cp = job.checkpoint;
  $("checkpoints").textContent = cp
    ? `#${cp.last_epoch} · ${cp.completed} ok, ${cp.failed} failed · last ${cp.last_duration_ms.toFixed(0)} ms` +
      (cp.last_completed_ms ? ` · ${fmtDuration(nowMs - cp.last_completed_ms)} ago` : "")
    : "–";
  $("state-bytes").textContent = fmtBytes(job.state_bytes);
  renderGraph(job, nowMs);
  renderCheckpoints(job.checkpoints);
  $("sql").textContent = job.statement;
}

async function poll() {
  try {
    const response = await fetch("/api/jobs", { cache: "no-store" });
    if (!response.ok) throw new Error(response.status + " " + response.statusText);
    const data = await response.json();
    renderJobs(data);
    if (selected != null) {
      const r = await fetch("/api/jobs/" + encodeURIComponent(selected), { cache: "no-store" });
      if (r.ok) renderDetail(await r.json(), Date.now());
    }
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
    $("status").dataset.polls = String(Number($("status").dataset.polls || 0) + 1);
  } catch (e) {
    $("status").textContent = "cannot reach weir: " + e.message;
  }
}

poll();
setInterval(poll, POLL_MS);
