"use strict";

const $ = (id) => document.getElementById(id);

function seconds(value) {
  if (value == null) return "";
  const whole = Math.round(value);
  const m = Math.floor(whole / 60), s = whole % 60;
  return `${m}:${String(s).padStart(2, "0")}`;
}

function clock(value) {
  const m = Math.floor(value / 60);
  return `${m}:${(value - 60 * m).toFixed(3).padStart(6, "0")}`;
}

function megabytes(bytes) {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(1)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

async function api(path, query = {}, method = "GET") {
  const response = await fetch(`${path}?${new URLSearchParams(query)}`, {method});
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// ---- library ------------------------------------------------------------------------------

function fileCard(file) {
  const item = document.createElement("article");
  item.className = "file";
  item.dataset.file = file.name;
  const image = document.createElement("img");
  image.alt = file.name;
  image.loading = "lazy";
  image.src = `/api/thumbnail?file=${encodeURIComponent(file.name)}`;
  const name = document.createElement("div");
  name.className = "name";
  name.textContent = file.name.slice(file.name.indexOf("/") + 1);
  const facts = document.createElement("div");
  facts.className = "facts";
  const size = file.width ? `${file.width}×${file.height}` : "";
  const rendered = {queued: "queued", running: "rendering", done: "restored", failed: "render failed"}[file.render];
  facts.textContent = [file.kind, size, seconds(file.seconds), megabytes(file.bytes), rendered].filter(Boolean)
    .join(" · ");
  item.append(image, name, facts);
  if (file.problem) {
    const problem = document.createElement("div");
    problem.className = "problem";
    problem.textContent = file.problem;
    item.append(problem);
    image.remove();
  } else {
    item.tabIndex = 0;
    item.addEventListener("click", () => openClip(file));
    item.addEventListener("keydown", (event) => { if (event.key === "Enter") openClip(file); });
  }
  return item;
}

async function showLibrary() {
  const library = await api("/api/library");
  $("folders").textContent = library.folders.join(" · ");
  $("library").replaceChildren(...library.files.map(fileCard));
  $("empty").hidden = library.files.length > 0;
}

// ---- one clip: faces, preview, range ------------------------------------------------------

const clip = {file: null, survey: null, chosen: null, start: null, end: null, shown: null, asked: 0};

function showError(message) {
  $("clip-error").textContent = message || "";
  $("clip-error").hidden = !message;
}

function openClip(file) {
  Object.assign(clip, {file, survey: null, chosen: null, start: null, end: null, shown: null});
  $("library").hidden = $("empty").hidden = true;
  $("clip").hidden = $("back").hidden = false;
  $("clip-name").textContent = file.name.slice(file.name.indexOf("/") + 1);
  $("clip").classList.toggle("photo", file.kind === "photo");  // one picture: no time, no tracks
  $("time").max = file.seconds || 0;
  $("time").value = 0;
  $("cards").replaceChildren();
  $("picks").hidden = $("survey-progress").hidden = true;
  $("survey").disabled = $("render").disabled = false;
  $("render-note").textContent = "";
  showError("");
  showRange();
  if (file.kind === "video") api("/api/survey", {file: file.name}).then(followSurvey, () => {});  // one already made
  preview();
}

function closeClip() {
  clip.file = null;
  $("clip").hidden = $("back").hidden = true;
  $("library").hidden = false;
  showLibrary();
}

function tracksParam() {
  return clip.chosen === null ? "all" : [...clip.chosen].sort((a, b) => a - b).join(",");
}

let previewTimer = null;
function preview() {
  clearTimeout(previewTimer);
  previewTimer = setTimeout(askPreview, 150);
}

async function askPreview() {
  const asked = ++clip.asked;
  $("busy").hidden = false;
  try {
    const shown = await api("/api/still", {
      file: clip.file.name, time: $("time").value, tracks: tracksParam(), strength: $("strength").value,
      mask: $("mask").value, smooth: $("smooth").value});
    if (asked !== clip.asked) return;  // a newer request is on its way
    await Promise.all([load($("decoded"), shown.decoded), load($("restored"), shown.restored)]);
    if (asked !== clip.asked) return;
    clip.shown = shown;
    $("time-label").textContent = clock(shown.time);
    showZoomButtons();
    showError("");
  } catch (error) {
    if (asked === clip.asked) showError(error.message);
  } finally {
    if (asked === clip.asked) $("busy").hidden = true;
  }
}

function load(image, url) {
  return new Promise((resolve, reject) => {
    image.onload = resolve;
    image.onerror = () => reject(new Error("the preview's picture could not be loaded"));
    image.src = url;
  });
}

function showZoomButtons() {
  const buttons = clip.shown.faces.map((face) => {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = face.track !== "" ? `Face ${face.track}` : "Face";
    button.addEventListener("click", () => zoomTo(face.box));
    return button;
  });
  $("zoom-faces").replaceChildren(...buttons);
}

function zoomTo(box) {
  const {width, height} = clip.shown;
  const [x0, y0, x1, y1] = box;
  const scale = Math.max(1, Math.min(8, 0.5 * Math.min(width / (x1 - x0), height / (y1 - y0))));
  const origin = `${((x0 + x1) / 2 / width) * 100}% ${((y0 + y1) / 2 / height) * 100}%`;
  for (const image of [$("decoded"), $("restored")]) {
    image.style.transformOrigin = origin;
    image.style.transform = `scale(${scale})`;
  }
  $("zoom-out").hidden = false;
}

function zoomOut() {
  for (const image of [$("decoded"), $("restored")]) image.style.transform = "";
  $("zoom-out").hidden = true;
}

function showView() {
  const wipe = $("view").value === "wipe";
  $("pictures").className = wipe ? "wipe" : "side";
  $("wipe-control").hidden = !wipe;
  $("restored").parentElement.parentElement.style.clipPath = wipe ? `inset(0 0 0 ${$("wipe").value}%)` : "";
}

function showRange() {
  const total = Number($("time").max) || 1;
  const start = clip.start ?? 0, end = clip.end ?? total;
  $("range-label").textContent = clip.start === null && clip.end === null
    ? "whole clip" : `${clock(start)} – ${clock(end)}`;
  $("range-band").style.left = `${(start / total) * 100}%`;
  $("range-band").style.width = `${((end - start) / total) * 100}%`;
}

function setRange(which) {
  const at = clip.shown ? clip.shown.time : Number($("time").value);
  clip[which] = at;
  if (clip.start !== null && clip.end !== null && clip.start >= clip.end) clip[which === "start" ? "end" : "start"] = null;
  showRange();
}

// ---- faces --------------------------------------------------------------------------------

async function startSurvey() {
  $("survey").disabled = true;
  try {
    followSurvey(await api("/api/survey", {file: clip.file.name}, "POST"));
  } catch (error) {
    showError(error.message);
    $("survey").disabled = false;
  }
}

async function followSurvey(survey) {
  if (!clip.file || survey.file !== clip.file.name) return;
  $("survey").disabled = true;
  const bar = $("survey-progress");
  bar.hidden = survey.state !== "running";
  bar.max = survey.total || 1;
  bar.value = survey.done;
  if (survey.state === "running") {
    setTimeout(() => api("/api/survey", {file: survey.file}).then(followSurvey, (e) => showError(e.message)), 300);
    return;
  }
  if (survey.state === "failed") {
    showError(survey.error);
    $("survey").disabled = false;
    return;
  }
  clip.survey = survey;
  clip.chosen = new Set(survey.tracks.map((card) => card.track));
  $("picks").hidden = false;
  $("cards").replaceChildren(...survey.tracks.map(faceCard));
  preview();
}

function faceCard(card) {
  const item = document.createElement("article");
  item.className = "face chosen";
  item.dataset.track = card.track;
  item.tabIndex = 0;
  const image = document.createElement("img");
  image.alt = `face ${card.track}`;
  image.src = `/api/face?file=${encodeURIComponent(clip.file.name)}&track=${card.track}`;
  const facts = document.createElement("div");
  facts.className = "facts";
  facts.textContent = `${card.track} · ${clock(card.first)} – ${clock(card.last)} · ${card.frames} frames · ` +
    `${Math.round(card.face_px)} px`;
  item.append(image, facts);
  const toggle = () => {
    if (clip.chosen.has(card.track)) clip.chosen.delete(card.track); else clip.chosen.add(card.track);
    showChosen();
    $("time").value = card.best_time;
    preview();
  };
  item.addEventListener("click", toggle);
  item.addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") toggle(); });
  return item;
}

function showChosen() {
  for (const item of $("cards").children) {
    item.classList.toggle("chosen", clip.chosen.has(Number(item.dataset.track)));
  }
  $("render").disabled = clip.chosen.size === 0;
}

function pick(rule) {
  clip.chosen = new Set(rule === "none" ? [] : clip.survey.picks[rule]);
  showChosen();
  preview();
}

// ---- wiring -------------------------------------------------------------------------------

$("back").addEventListener("click", closeClip);
$("time").addEventListener("input", () => { $("time-label").textContent = clock(Number($("time").value)); preview(); });
for (const id of ["strength", "smooth"]) {
  $(id).addEventListener("input", () => { $(`${id}-label`).textContent = Number($(id).value).toFixed(2); preview(); });
}
$("mask").addEventListener("change", preview);
$("view").addEventListener("change", showView);
$("wipe").addEventListener("input", showView);
$("zoom-out").addEventListener("click", zoomOut);
$("set-start").addEventListener("click", () => setRange("start"));
$("set-end").addEventListener("click", () => setRange("end"));
$("clear-range").addEventListener("click", () => { clip.start = clip.end = null; showRange(); });
$("survey").addEventListener("click", startSurvey);
for (const button of document.querySelectorAll("[data-pick]")) {
  button.addEventListener("click", () => pick(button.dataset.pick));
}

showLibrary();
