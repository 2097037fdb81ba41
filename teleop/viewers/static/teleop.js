// factory teleop page: frames in over a websocket, keys / pointer / gamepad out.
"use strict";
const teleop = { frames: 0, hud: null, connected: false, opened: false, sent: 0 };
window.teleop = teleop;

const canvas = document.getElementById("frame");
const ctx = canvas.getContext("2d");
const hudEl = document.getElementById("hud");
const statusEl = document.getElementById("status");
// The page's own token (from its URL) opens the websocket; the server refuses any other.
const token = new URLSearchParams(location.search).get("token");
const query = token === null ? "" : `?token=${encodeURIComponent(token)}`;
const ws = new WebSocket(`ws://${location.host}/ws${query}`);
ws.binaryType = "blob";

function send(msg) {
  if (ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(msg)); teleop.sent += 1; }
}

ws.onopen = () => { teleop.connected = true; teleop.opened = true; statusEl.textContent = "connected"; statusEl.className = "on"; };
ws.onclose = () => {
  teleop.connected = false;
  statusEl.className = "off";
  statusEl.textContent = teleop.opened ? "disconnected" : "refused (open the URL printed, with its ?token=)";
};
ws.onmessage = async (event) => {
  if (typeof event.data === "string") {
    const hud = JSON.parse(event.data);
    teleop.hud = hud;
    const state = hud.recording ? '<span class="rec">REC</span>' : "idle";
    hudEl.innerHTML = `${state}  episode ${hud.episode}  ${hud.elapsed_s.toFixed(1)} s  ` +
      `${hud.frames} frames\n${hud.fps.toFixed(1)} fps  score ${hud.score.toFixed(2)}  ` +
      `saved ${hud.saved}\n${hud.message}`;
    return;
  }
  const bitmap = await createImageBitmap(event.data);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  teleop.frames += 1;
};

const HANDLED = new Set(["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", " ", "Backspace"]);
function onKey(event, down) {
  if (event.repeat) return;
  if (HANDLED.has(event.key)) event.preventDefault();
  send({ type: "key", key: event.key, down });
}
window.addEventListener("keydown", (e) => onKey(e, true));
window.addEventListener("keyup", (e) => onKey(e, false));
window.addEventListener("blur", () => ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "w", "a", "s", "d"]
  .forEach((key) => send({ type: "key", key, down: false })));

function onPointer(event) {
  const rect = canvas.getBoundingClientRect();
  const u = (event.clientX - rect.left) / rect.width;
  const v = (event.clientY - rect.top) / rect.height;
  send({ type: "pointer", u, v, buttons: event.buttons });
}
for (const kind of ["pointermove", "pointerdown", "pointerup"]) canvas.addEventListener(kind, onPointer);

// Gamepad API: the left stick moves the target; buttons map to keys.
const PAD_KEYS = { 0: " ", 3: "Enter", 1: "n", 2: "x", 9: "r" };
const DEADZONE = 0.1;
let padButtons = [];
let padAxes = [0, 0];
function pollGamepad() {
  const pad = (navigator.getGamepads ? navigator.getGamepads() : [])[0];
  if (pad) {
    const axes = [pad.axes[0] || 0, pad.axes[1] || 0].map((a) => (Math.abs(a) < DEADZONE ? 0 : a));
    if (Math.abs(axes[0] - padAxes[0]) > 0.01 || Math.abs(axes[1] - padAxes[1]) > 0.01) {
      padAxes = axes;
      send({ type: "axes", x: axes[0], y: axes[1] });
    }
    pad.buttons.forEach((button, i) => {
      if (button.pressed && !padButtons[i] && PAD_KEYS[i] !== undefined) {
        send({ type: "key", key: PAD_KEYS[i], down: true });
        send({ type: "key", key: PAD_KEYS[i], down: false });
      }
      padButtons[i] = button.pressed;
    });
  }
  requestAnimationFrame(pollGamepad);
}
requestAnimationFrame(pollGamepad);
canvas.focus();
