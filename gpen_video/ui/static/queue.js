"use strict";

// The queue and the saved settings; desk.js (loaded first) holds the helpers and the clip.

// ---- saved settings -----------------------------------------------------------------------

let savedSettings = {};

async function showSettings(select = "") {
  savedSettings = (await api("/api/settings")).saved;
  const options = Object.keys(savedSettings).map((name) => new Option(name, name));
  $("saved").replaceChildren(new Option("as set here", ""), ...options);
  $("saved").value = select;
}

function useSettings() {
  const values = savedSettings[$("saved").value];
  if (!values) return;
  for (const id of ["strength", "smooth"]) {
    if (values[id] !== undefined) {
      $(id).value = values[id];
      $(`${id}-label`).textContent = Number(values[id]).toFixed(2);
    }
  }
  if (values.mask) $("mask").value = values.mask;
  preview();
}

async function saveSettings() {
  const name = window.prompt("Save these settings as");
  if (!name) return;
  try {
    await api("/api/settings", {name, strength: $("strength").value, mask: $("mask").value,
                                smooth: $("smooth").value}, "POST");
    await showSettings(name);
  } catch (error) {
    showError(error.message);
  }
}

// ---- queue --------------------------------------------------------------------------------

async function queueRender() {
  const settings = {file: clip.file.name, tracks: tracksParam(), strength: $("strength").value,
                    mask: $("mask").value, smooth: $("smooth").value};
  if (clip.start !== null) settings.start = clip.start;
  if (clip.end !== null) settings.end = clip.end;
  try {
    const queued = await api("/api/render", settings, "POST");
    $("render-note").textContent = `queued as render ${queued.id}`;
    showQueue();
  } catch (error) {
    showError(error.message);
  }
}

function renderItem(render) {
  const item = document.createElement("li");
  item.className = `render ${render.state}`;
  item.dataset.id = render.id;
  const title = document.createElement("div");
  title.className = "name";
  title.textContent = `${render.file.slice(render.file.indexOf("/") + 1)} → ${render.output.slice(render.output.indexOf("/") + 1)}`;
  const state = document.createElement("div");
  state.className = "facts";
  if (render.state === "running" && render.total) {
    const bar = document.createElement("progress");
    bar.max = render.total;
    bar.value = render.done;
    state.append(bar, ` ${render.done} / ${render.total} frames`);
  } else if (render.state === "done") {
    state.textContent = `done: ${render.frames} frames, ${render.faces} faces restored in ${render.seconds.toFixed(1)} s` +
      (render.resumed_at ? ` (went on from frame ${render.resumed_at})` : "");
  } else {
    state.textContent = render.state;
  }
  item.append(title, state);
  if (render.error) {
    const problem = document.createElement("div");
    problem.className = "problem";
    problem.textContent = render.error;
    item.append(problem);
  }
  for (const warning of render.warnings) {
    const note = document.createElement("div");
    note.className = "warning";
    note.textContent = warning;
    item.append(note);
  }
  if (render.plays) {
    const link = document.createElement("a");
    link.href = `/api/media?file=${encodeURIComponent(render.output)}`;
    link.target = "_blank";
    link.textContent = "Play the output";
    item.append(link);
  }
  return item;
}

let queueTimer = null;
async function showQueue() {
  clearTimeout(queueTimer);
  try {
    const {renders} = await api("/api/renders");
    $("renders").replaceChildren(...renders.map(renderItem));
    $("queue-empty").hidden = renders.length > 0;
    const open = renders.filter((r) => r.state === "queued" || r.state === "running");
    const total = open.reduce((sum, r) => sum + (r.total || 0), 0);
    $("queue-progress").hidden = open.length === 0;
    $("queue-progress").max = total || 1;
    $("queue-progress").value = open.reduce((sum, r) => sum + r.done, 0);
    queueTimer = setTimeout(showQueue, open.length ? 500 : 3000);
  } catch (error) {
    queueTimer = setTimeout(showQueue, 3000);
  }
}

// ---- wiring -------------------------------------------------------------------------------

$("saved").addEventListener("change", useSettings);
$("save-settings").addEventListener("click", saveSettings);
$("render").addEventListener("click", queueRender);
showQueue();
showSettings();
