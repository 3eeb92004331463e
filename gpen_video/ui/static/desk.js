"use strict";

function seconds(value) {
  if (value == null) return "";
  const whole = Math.round(value);
  const m = Math.floor(whole / 60), s = whole % 60;
  return `${m}:${String(s).padStart(2, "0")}`;
}

function megabytes(bytes) {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(1)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

function card(file) {
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
  facts.textContent = [file.kind, size, seconds(file.seconds), megabytes(file.bytes)].filter(Boolean).join(" · ");
  item.append(image, name, facts);
  if (file.problem) {
    const problem = document.createElement("div");
    problem.className = "problem";
    problem.textContent = file.problem;
    item.append(problem);
    image.remove();
  }
  return item;
}

async function showLibrary() {
  const response = await fetch("/api/library");
  const library = await response.json();
  document.getElementById("folders").textContent = library.folders.join(" · ");
  const shelf = document.getElementById("library");
  shelf.replaceChildren(...library.files.map(card));
  document.getElementById("empty").hidden = library.files.length > 0;
}

showLibrary();
