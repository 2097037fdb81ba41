// factory view: the episode table, a player with its coverage curve, and for an episode
// generated from a seeded reset, the ground truth replaying it side by side.
"use strict";
const token = new URLSearchParams(location.search).get("token");
const query = token === null ? "" : `?token=${encodeURIComponent(token)}`;
const api = (path) => `/api/${path}${query}`;
const PER_PAGE = 100;
const COLORS = { model: "#1f5fbf", real: "#e07b00", error: "#c0282d" };

const view = {
  store: null, rows: [], filtered: [], sort: { key: "index", dir: 1 }, page: 0,
  tableMs: null, episode: null, detail: null, frame: 0, playing: false,
  sheets: { model: null, real: null }, drawn: { model: 0, real: 0 },
  replay: null, replayStatus: "none", error: null,
};
window.dataview = view;
const $ = (id) => document.getElementById(id);
const canvases = { model: $("model"), real: $("real") };

function setStatus(text) { $("status").textContent = text; }

async function getJson(path) {
  const resp = await fetch(api(path));
  const body = await resp.json().catch(() => ({ error: `HTTP ${resp.status}` }));
  if (!resp.ok) throw new Error(body.error || `HTTP ${resp.status}`);
  return body;
}

function loadImage(path) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error(`cannot load ${path}`));
    img.src = api(path);
  });
}

// -- the table --------------------------------------------------------------------------
const fmt = {
  success: (v) => (v === true ? "yes" : v === false ? "no" : "?"),
  final_coverage: (v) => (v === null ? "-" : v.toFixed(2)),
  model_id: (v) => v || "-",
  seed: (v) => (v === null ? "-" : String(v)),
};

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function compare(a, b) {
  const { key, dir } = view.sort;
  const x = a[key], y = b[key];
  if (x === y) return a.index - b.index;
  if (x === null || x === undefined) return 1;  // unknowns last, either way
  if (y === null || y === undefined) return -1;
  return (x < y ? -1 : 1) * dir;
}

function matches(row) {
  const text = $("search").value.trim().toLowerCase();
  const source = $("source").value, success = $("success").value;
  if (source && row.source !== source) return false;
  if (success && String(row.success) !== success) return false;
  if ($("seeded").checked && !row.seeded) return false;
  if (!text) return true;
  const hay = [row.generator, row.model_id, row.source, row.task, row.seed, row.index];
  return hay.some((v) => v !== null && String(v).toLowerCase().includes(text));
}

function renderTable() {
  view.filtered = view.rows.filter(matches).sort(compare);
  const pages = Math.max(1, Math.ceil(view.filtered.length / PER_PAGE));
  view.page = Math.min(view.page, pages - 1);
  const first = view.page * PER_PAGE;
  const shown = view.filtered.slice(first, first + PER_PAGE);
  const body = document.createElement("tbody");
  for (const row of shown) {
    const tr = document.createElement("tr");
    tr.dataset.index = row.index;
    if (row.index === view.episode) tr.className = "selected";
    const td = document.createElement("td");
    const img = document.createElement("img");
    img.loading = "lazy";
    img.alt = "";
    img.src = api(`episodes/${row.index}/thumb.png`);
    td.appendChild(img);
    tr.appendChild(td);
    cell(tr, String(row.index), "num");
    cell(tr, row.source + (row.seeded ? " *" : ""));
    cell(tr, row.generator);
    cell(tr, fmt.model_id(row.model_id), "model");
    cell(tr, String(row.length), "num");
    cell(tr, fmt.success(row.success), row.success === true ? "yes" : row.success === false ? "no" : "unknown");
    cell(tr, fmt.final_coverage(row.final_coverage), "num");
    cell(tr, fmt.seed(row.seed), "num");
    tr.addEventListener("click", () => select(row.index));
    body.appendChild(tr);
  }
  $("episodes").replaceChild(body, $("episodes").tBodies[0]);
  const last = Math.min(first + PER_PAGE, view.filtered.length);
  $("count").textContent = `${view.filtered.length ? first + 1 : 0}-${last} of ${view.filtered.length}` +
    (view.filtered.length < view.rows.length ? ` (${view.rows.length} in the store)` : "");
  for (const th of document.querySelectorAll("th[data-key]")) {
    th.className = th.dataset.key === view.sort.key ? (view.sort.dir > 0 ? "asc" : "desc") : "";
  }
}

// -- the player -------------------------------------------------------------------------
function draw(which) {
  const sheet = view.sheets[which];
  if (!sheet) return;
  const { img, geo } = sheet;
  const t = Math.min(view.frame, geo.frames - 1);
  const c = canvases[which], ctx = c.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  const sx = (t % geo.cols) * geo.width, sy = Math.floor(t / geo.cols) * geo.height;
  ctx.drawImage(img, sx, sy, geo.width, geo.height, 0, 0, c.width, c.height);
  view.drawn[which] += 1;
}

function showFrame(t) {
  const n = view.detail ? view.detail.length : 1;
  view.frame = ((t % n) + n) % n;
  $("scrub").value = String(view.frame);
  $("frame").textContent = `t = ${view.frame} / ${n - 1}`;
  draw("model");
  draw("real");
  drawCurve();
}

let timer = null;
function play(on) {
  view.playing = on;
  $("play").textContent = on ? "pause" : "play";
  if (timer !== null) { clearInterval(timer); timer = null; }
  if (on) {
    const fps = (view.store && view.store.fps) || 10;
    timer = setInterval(() => showFrame(view.frame + 1), 1000 / fps);
  }
}

function sizeCanvases(geo) {
  const scale = Math.max(1, Math.floor(288 / Math.max(geo.width, geo.height)));
  for (const c of Object.values(canvases)) { c.width = geo.width * scale; c.height = geo.height * scale; }
}

// -- curves -----------------------------------------------------------------------------
function line(ctx, values, top, color, box) {
  if (!values) return;
  const n = values.length;
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  values.forEach((v, t) => {
    const x = box.x + (n > 1 ? (t / (n - 1)) * box.w : 0);
    const y = box.y + box.h - (Math.min(Math.max(v ?? 0, 0), top) / top) * box.h;
    if (t === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

function drawCurve() {
  const c = $("curve"), ctx = c.getContext("2d");
  const box = { x: 34, y: 8, w: c.width - 80, h: c.height - 24 };
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.fillStyle = "#555";
  ctx.font = "10px sans-serif";
  ctx.fillText("1.0", 8, box.y + 4);
  ctx.fillText("0", 20, box.y + box.h + 3);
  ctx.strokeStyle = "#bbb";
  ctx.setLineDash([4, 3]);
  ctx.beginPath();
  const goal = box.y + box.h * 0.05;
  ctx.moveTo(box.x, goal); ctx.lineTo(box.x + box.w, goal); ctx.stroke();
  ctx.setLineDash([]);
  ctx.strokeRect(box.x, box.y, box.w, box.h);
  const r = view.replay;
  line(ctx, view.detail && view.detail.coverage, 1, COLORS.model, box);
  if (r) {
    line(ctx, r.real_coverage, 1, COLORS.real, box);
    const top = Math.max(1, ...r.position_err_px.map((v) => v ?? 0));
    line(ctx, r.position_err_px, top, COLORS.error, box);
    ctx.fillStyle = COLORS.error;
    ctx.fillText(`${top.toFixed(0)} px`, box.x + box.w + 4, box.y + 4);
    ctx.fillText("0 px", box.x + box.w + 4, box.y + box.h + 3);
  }
  const n = view.detail ? view.detail.length : 1;
  const x = box.x + (n > 1 ? (view.frame / (n - 1)) * box.w : 0);
  ctx.strokeStyle = "#222";
  ctx.beginPath(); ctx.moveTo(x, box.y); ctx.lineTo(x, box.y + box.h); ctx.stroke();
  legend();
}

function legend() {
  const el = $("legend");
  el.replaceChildren();
  const t = view.frame, d = view.detail, r = view.replay;
  const item = (color, text) => {
    const s = document.createElement("span");
    s.className = "swatch";
    s.style.background = color;
    el.appendChild(s);
    el.appendChild(document.createTextNode(text));
  };
  const at = (values) => (values && values[t] !== null && values[t] !== undefined ? values[t].toFixed(2) : "-");
  item(COLORS.model, `coverage${r ? " (model)" : ""} ${at(d && d.coverage)}`);
  if (r) {
    item(COLORS.real, `coverage (ground truth) ${at(r.real_coverage)}`);
    item(COLORS.error, `block error ${at(r.position_err_px)} px, ${at(r.angle_err_deg)} deg`);
  }
}

// -- one episode ------------------------------------------------------------------------
async function loadSheet(which, path, geo) {
  const img = await loadImage(path);
  if (view.detail === null || geo !== view.detail.sheet) return;  // another episode since
  view.sheets[which] = { img, geo };
  draw(which);
}

function describe(d) {
  const m = d.meta;
  const parts = [`${d.length} frames`, `source ${d.source}`, `generator ${d.generator}`];
  if (d.model_id) parts.push(`model ${d.model_id}`);
  if (d.seed !== null) parts.push(`seed ${d.seed}`);
  parts.push(`success ${fmt.success(d.success)}`, `final coverage ${fmt.final_coverage(d.final_coverage)}`);
  const extra = m.extra && m.extra.initial ? `\nstarted from a ${m.extra.initial} reset` : "";
  return parts.join("  ") + (m.task ? `\ntask: ${m.task}` : "") + extra;
}

async function loadReplay(index, geo) {
  view.replayStatus = "loading";
  $("real-figure").hidden = false;
  $("model-caption").textContent = "inside the model";
  $("replay-info").textContent = "replaying the actions in the ground truth ...";
  try {
    const r = await getJson(`episodes/${index}/replay.json`);
    if (view.episode !== index) return;
    view.replay = r;
    await loadSheet("real", `episodes/${index}/replay.png`, geo);
    const tr = r.transfer;
    $("replay-info").textContent =
      `ground truth reset by ${tr.reset}; model says ${fmt.success(tr.model_success)}, ` +
      `ground truth says ${fmt.success(tr.real_success)} (final coverage ` +
      `${tr.real_final_score.toFixed(2)}); final block error ${tr.block_err_px.toFixed(1)} px, ` +
      `${tr.angle_err_deg.toFixed(1)} deg`;
    view.replayStatus = "ready";
    showFrame(view.frame);
  } catch (err) {
    view.replayStatus = "error";
    $("replay-info").textContent = `no replay: ${err.message}`;
  }
}

async function select(index) {
  play(false);
  view.episode = index;
  view.detail = null;
  view.replay = null;
  view.replayStatus = "none";
  view.sheets = { model: null, real: null };
  renderTable();
  try {
    const d = await getJson(`episodes/${index}`);
    if (view.episode !== index) return;
    view.detail = d;
    $("detail").hidden = false;
    $("title").textContent = `episode ${index}`;
    $("meta").textContent = describe(d);
    $("film").src = api(`episodes/${index}/film.png`);
    $("real-figure").hidden = true;
    $("model-caption").textContent = "episode";
    $("replay-info").textContent = "";
    $("scrub").max = String(d.length - 1);
    showFrame(0);
    if (d.sheet) {
      sizeCanvases(d.sheet);
      await loadSheet("model", `episodes/${index}/frames.png`, d.sheet);
    }
    if (d.seeded && d.sheet) await loadReplay(index, d.sheet);
  } catch (err) {
    setStatus(`error: ${err.message}`);
    view.error = err.message;
  }
}

// -- wiring -----------------------------------------------------------------------------
function wire() {
  for (const id of ["search", "source", "success", "seeded"]) {
    $(id).addEventListener("input", () => { view.page = 0; renderTable(); });
  }
  for (const th of document.querySelectorAll("th[data-key]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      view.sort = { key, dir: view.sort.key === key ? -view.sort.dir : 1 };
      renderTable();
    });
  }
  $("prev").addEventListener("click", () => { view.page = Math.max(0, view.page - 1); renderTable(); });
  $("next").addEventListener("click", () => { view.page += 1; renderTable(); });
  $("play").addEventListener("click", () => play(!view.playing));
  $("scrub").addEventListener("input", () => { play(false); showFrame(Number($("scrub").value)); });
  document.addEventListener("keydown", (e) => {
    if (view.detail === null || e.target.tagName === "INPUT") return;
    if (e.key === " ") { e.preventDefault(); play(!view.playing); }
    if (e.key === "ArrowRight") { play(false); showFrame(view.frame + 1); }
    if (e.key === "ArrowLeft") { play(false); showFrame(view.frame - 1); }
  });
}

async function start() {
  wire();
  try {
    const started = performance.now();
    view.store = await getJson("store");
    const table = await getJson("episodes");
    view.rows = table.rows;
    view.tableMs = performance.now() - started;
    $("store").textContent = `${view.store.path}: ${view.store.episodes} episodes, ` +
      `${view.store.frames} frames at ${view.store.fps} fps`;
    for (const source of [...new Set(view.rows.map((r) => r.source))].sort()) {
      const opt = document.createElement("option");
      opt.value = opt.textContent = source;
      $("source").appendChild(opt);
    }
    renderTable();
    setStatus("* generated in the model from a seeded reset: shown beside its ground-truth replay");
  } catch (err) {
    view.error = err.message;
    setStatus(`error: ${err.message}`);
  }
}

start();
