// mocap4r2 web panel: systems, sessions and a live 3D view, drawn with a 2D canvas and a
// small perspective projection of our own (no library, no build step). Every text from the
// server is put in the page with textContent, never as HTML.
"use strict";

const TRACKED = "#43d675", UNTRACKED = "#ff4040", MARKER = "#e0e6ee", OCCLUDED = "#667";
const SEGMENT = "#5ab0ff", BACKGROUND = "#10161d", GRID = "#26313d";
const TRAIL_LENGTH = 120;
// the recorder's rules for a session id (recording/session_id.py), checked again by the server
function sessionProblem(id) {
  if (!id) return "the session id is empty";
  if (new TextEncoder().encode(id).length > 128) return "the session id is longer than 128 bytes";
  if (/[\x00-\x1f\x7f-\x9f]/.test(id)) return "the session id contains a control character";
  if (id.includes("/") || id.includes("\\")) return "the session id contains a path separator";
  if (id.includes("..")) return "the session id contains '..'";
  if (id.startsWith(".")) return "the session id starts with '.'";
  if (id !== id.trim()) return "the session id starts or ends with white space";
  return null;
}

const panel = { systems: [], framesDrawn: 0, framesReceived: 0, latencies: [], fps: 0, lastFrame: null,
                bodyColours: {} };
window.panel = panel;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

// ------------------------------------------------------------------ systems
const ticked = new Set();
function renderSystems(rows) {
  const body = document.querySelector("#systems tbody");
  body.replaceChildren();
  for (const s of rows) {
    const tr = el("tr", null, "level-" + s.level);
    tr.dataset.system = s.system;
    const box = el("input"); box.type = "checkbox"; box.checked = ticked.has(s.system);
    box.addEventListener("change", () => box.checked ? ticked.add(s.system) : ticked.delete(s.system));
    const td0 = el("td"); td0.append(box); tr.append(td0);
    const ratios = Object.entries(s.tracking || {}).map(([k, v]) => k + " " + Math.round(100 * v) + "%");
    for (const [value, cls] of [[s.system], [s.type], [s.state, "state"], [s.rate], [s.measured_rate || "-"],
        [s.latency_ms || "-"], [s.dropped || "-"], [ratios.join(", ") || "-"], [s.session || "-", "session"]]) {
      tr.append(el("td", value, cls));
    }
    const levelText = { 0: "OK", 1: "WARN", 2: "ERROR" }[s.level] || "-";
    const status = el("td", levelText + (s.message ? ": " + s.message : ""), "status" + (s.level === 2 ? " error" : ""));
    tr.append(status);
    const actions = el("td");
    if (s.type !== "recorder") {
      for (const t of ["configure", "activate", "deactivate"]) {
        const b = el("button", t); b.type = "button"; b.dataset.transition = t;
        b.addEventListener("click", () => transition(s.system, t));
        actions.append(b);
      }
    }
    tr.append(actions);
    body.append(tr);
  }
  const select = document.getElementById("live-system");
  const liveRows = rows.filter(s => s.live);
  const live = liveRows.map(s => s.system);
  const current = select.value;
  const rebuilt = live.join() !== [...select.options].map(o => o.value).join();
  if (rebuilt) select.replaceChildren(...live.map(n => { const o = el("option", n); o.value = n; return o; }));
  // the system the user picked while it is listed; until then the first active one (an
  // inactive system sends no frames, and the list's order is the order of discovery)
  let wanted = current;
  if (!(liveChosen && live.includes(current))) {
    const active = liveRows.find(s => s.state === "active");
    wanted = active ? active.system : (live.includes(current) ? current : (live[0] || ""));
  }
  if (rebuilt || wanted !== current) {
    select.value = wanted;
    chooseSystem();
  }
}

async function transition(system, t) {
  try {
    const r = await api("/api/lifecycle", { system, transition: t });
    note((r.success ? "ok " : "FAILED ") + t + " " + system + (r.message ? ": " + r.message : ""), r.success);
  } catch (e) { note(t + " " + system + ": " + e.message, false); }
}

async function pollSystems() {
  try {
    panel.systems = await api("/api/systems");
    renderSystems(panel.systems);
    document.getElementById("status").textContent = panel.systems.length + " systems";
  } catch (e) { document.getElementById("status").textContent = "panel unreachable: " + e.message; }
}

// ------------------------------------------------------------------ session
function note(text, ok) {
  const li = el("li", new Date().toLocaleTimeString() + " " + text, ok ? "ack-ok" : "ack-fail");
  const list = document.getElementById("acks");
  list.prepend(li);
  while (list.children.length > 50) list.lastChild.remove();
}

async function control(start) {
  const id = document.getElementById("session-id").value;
  const problem = start ? sessionProblem(id) : (id ? sessionProblem(id) : null);
  document.getElementById("session-problem").textContent = problem || "";
  if (problem) return;
  const verb = start ? "START" : "STOP";
  try {
    const r = await api(start ? "/api/start" : "/api/stop", { session_id: id, systems: [...ticked] });
    for (const a of r.acks) {
      note(verb + " " + a.system + ": " + (a.success ? "ok" : "FAILED") + (a.message ? " — " + a.message : "")
           + (a.recorder ? " [recorder]" : ""), a.success);
    }
    for (const m of r.missing) note(verb + " " + m + ": no answer", false);
    if (!r.acks.length && !r.missing.length) note(verb + ": no system answered", false);
  } catch (e) { note(verb + ": " + e.message, false); }
  pollSystems(); pollSessions();
}

async function pollSessions() {
  let rows = [];
  try { rows = await api("/api/sessions"); } catch (e) { return; }
  const body = document.querySelector("#sessions tbody");
  body.replaceChildren();
  for (const s of rows.slice().reverse()) {
    const tr = el("tr");
    const start = s.start_ns ? new Date(s.start_ns / 1e6).toLocaleString() : "-";
    for (const v of [s.session, start, s.duration.toFixed(1), s.systems.join(", "), s.messages, s.state]) tr.append(el("td", v));
    const links = el("td");
    for (const fmt of ["c3d", "trc", "csv"]) {
      for (const system of (s.systems.length ? s.systems : [""])) {
        const a = el("a", fmt.toUpperCase() + (s.systems.length > 1 ? " " + system : ""));
        const q = new URLSearchParams({ session: s.session, format: fmt });
        if (system) q.set("system", system);
        a.href = "/api/export?" + q; a.className = "export-" + fmt;
        links.append(a, " ");
      }
    }
    tr.append(links);
    body.append(tr);
  }
}

// ------------------------------------------------------------------ live view
const view = { yaw: -0.6, pitch: 0.55, distance: 9, target: [0, 0, 0.8] };
const trails = new Map();
let frame = null, socket = null;
let liveChosen = false;  // the user picked the live system: the page no longer follows the active one

function chooseSystem() {
  trails.clear(); frame = null;
  const system = document.getElementById("live-system").value;
  if (socket && socket.readyState === WebSocket.OPEN && system) socket.send(JSON.stringify({ system, rate: 30 }));
}

function connect() {
  socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  socket.onopen = chooseSystem;
  socket.onmessage = (event) => {
    const data = JSON.parse(event.data);
    if (data.type !== "frame" || data.system !== document.getElementById("live-system").value) return;
    frame = data; panel.framesReceived++; panel.lastFrame = data;
    panel.latencies.push(Date.now() / 1000 - data.stamp);
    if (panel.latencies.length > 1000) panel.latencies.shift();
    for (const b of data.bodies) {
      if (!b.p.every(Number.isFinite)) continue;
      const trail = trails.get(b.name) || [];
      trail.push(b.p); if (trail.length > TRAIL_LENGTH) trail.shift();
      trails.set(b.name, trail);
    }
  };
  socket.onclose = () => setTimeout(connect, 1000);
}

function project(p, canvas) {
  // orbit camera around view.target: yaw about z, pitch above the xy plane
  const x = p[0] - view.target[0], y = p[1] - view.target[1], z = p[2] - view.target[2];
  const cy = Math.cos(view.yaw), sy = Math.sin(view.yaw), cp = Math.cos(view.pitch), sp = Math.sin(view.pitch);
  // the camera sits behind (-y of its heading) and above, looking along (0, cp, -sp): right
  // is +x and up (0, sp, cp), so the top view shows x to the right and y up (right-handed)
  const xr = cy * x + sy * y, yr = -sy * x + cy * y;
  const depth = view.distance + cp * yr - sp * z;
  const up = sp * yr + cp * z;
  if (depth < 0.05) return null;
  const f = canvas.height * 1.2;
  return [canvas.width / 2 + f * xr / depth, canvas.height / 2 - f * up / depth, depth];
}

function rotate(q, v) {
  const [x, y, z, w] = q, [vx, vy, vz] = v;
  const tx = 2 * (y * vz - z * vy), ty = 2 * (z * vx - x * vz), tz = 2 * (x * vy - y * vx);
  return [vx + w * tx + (y * tz - z * ty), vy + w * ty + (z * tx - x * tz), vz + w * tz + (x * ty - y * tx)];
}

function line(ctx, a, b, colour, width) {
  if (!a || !b) return;
  ctx.strokeStyle = colour; ctx.lineWidth = width || 1;
  ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
}

let frameTimes = [];
function draw(now) {
  const canvas = document.getElementById("view"), ctx = canvas.getContext("2d");
  ctx.fillStyle = BACKGROUND; ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let i = -3; i <= 3; i++) {                                // the floor, 1 m grid
    line(ctx, project([i, -3, 0], canvas), project([i, 3, 0], canvas), GRID);
    line(ctx, project([-3, i, 0], canvas), project([3, i, 0], canvas), GRID);
  }
  const o = project([0, 0, 0], canvas);
  line(ctx, o, project([0.5, 0, 0], canvas), "#f55", 2);
  line(ctx, o, project([0, 0.5, 0], canvas), "#5f5", 2);
  line(ctx, o, project([0, 0, 0.5], canvas), "#59f", 2);
  const legend = document.getElementById("bodies");
  if (frame) {
    frame.markers.forEach((m, i) => {
      if (!m.every(Number.isFinite)) return;
      const p = project(m, canvas); if (!p) return;
      ctx.fillStyle = frame.occluded[i] ? OCCLUDED : MARKER;
      ctx.fillRect(p[0] - 2, p[1] - 2, 4, 4);
    });
    const byId = new Map(frame.segments.map(s => [s.skeleton + "/" + s.id, s]));
    for (const s of frame.segments) {
      const parent = byId.get(s.skeleton + "/" + s.parent);
      if (parent) line(ctx, project(s.p, canvas), project(parent.p, canvas), s.tracked ? SEGMENT : UNTRACKED, 2);
    }
    if (document.getElementById("trails").checked) {
      for (const [name, trail] of trails) {
        const b = frame.bodies.find(x => x.name === name);
        ctx.globalAlpha = 0.5;
        for (let i = 1; i < trail.length; i++) {
          line(ctx, project(trail[i - 1], canvas), project(trail[i], canvas), b && !b.tracked ? UNTRACKED : TRACKED);
        }
        ctx.globalAlpha = 1;
      }
    }
    const items = [];
    for (const b of frame.bodies) {
      const colour = b.tracked ? TRACKED : UNTRACKED;
      panel.bodyColours[b.name] = colour;
      const c = project(b.p, canvas);
      if (c) {
        ctx.fillStyle = colour; ctx.beginPath(); ctx.arc(c[0], c[1], 6, 0, 2 * Math.PI); ctx.fill();
        [[1, 0, 0], [0, 1, 0], [0, 0, 1]].forEach((axis, k) => {
          const r = rotate(b.q, axis).map((v, j) => b.p[j] + 0.25 * v);
          line(ctx, c, project(r, canvas), b.tracked ? ["#f55", "#5f5", "#59f"][k] : UNTRACKED, 2);
        });
        ctx.fillStyle = colour; ctx.font = "12px sans-serif"; ctx.fillText(b.name, c[0] + 8, c[1] - 8);
      }
      const li = el("li", b.name + (b.tracked ? " tracked" : " NOT tracked"), b.tracked ? "tracked" : "untracked");
      li.dataset.body = b.name;
      items.push(li);
    }
    legend.replaceChildren(...items);
  }
  panel.framesDrawn++;
  frameTimes.push(now); while (frameTimes.length && now - frameTimes[0] > 1000) frameTimes.shift();
  panel.fps = frameTimes.length;
  document.getElementById("fps").textContent = panel.fps + " fps" + (frame ? ", frame " + frame.frame : "");
  requestAnimationFrame(draw);
}

function setupControls() {
  const canvas = document.getElementById("view");
  let drag = null;
  canvas.addEventListener("pointerdown", e => { drag = [e.clientX, e.clientY]; canvas.setPointerCapture(e.pointerId); });
  canvas.addEventListener("pointerup", () => { drag = null; });
  canvas.addEventListener("pointermove", e => {
    if (!drag) return;
    view.yaw -= (e.clientX - drag[0]) * 0.01;
    view.pitch = Math.max(-1.5, Math.min(1.5707, view.pitch + (e.clientY - drag[1]) * 0.01));
    drag = [e.clientX, e.clientY];
  });
  canvas.addEventListener("wheel", e => {
    e.preventDefault();
    view.distance = Math.max(1, Math.min(60, view.distance * Math.exp(e.deltaY * 0.001)));
  }, { passive: false });
  document.getElementById("top-view").addEventListener("click", () => { view.pitch = 1.5707; view.yaw = 0; });
  document.getElementById("reset-view").addEventListener("click", () => Object.assign(view, { yaw: -0.6, pitch: 0.55, distance: 9 }));
  document.getElementById("live-system").addEventListener("change", () => { liveChosen = true; chooseSystem(); });
  document.getElementById("start").addEventListener("click", () => control(true));
  document.getElementById("stop").addEventListener("click", () => control(false));
  document.getElementById("session-id").addEventListener("input", e => {
    document.getElementById("session-problem").textContent = sessionProblem(e.target.value) || "";
  });
}

setupControls();
pollSystems(); pollSessions();
setInterval(pollSystems, 1000);
setInterval(pollSessions, 5000);
connect();
requestAnimationFrame(draw);
