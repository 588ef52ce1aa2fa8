// Starting from an image: the page's source image and the mask painted on it. A file of its
// own so that the rest of the page (app.js) only asks two things of it: whether an image is
// loaded, and the parts to send (window.imagegenEdit). Loaded before app.js.
//
// The mask is a canvas the image's own size laid over it: strokes are painted in the image's
// pixels (the brush size too), so what is sent is exactly what was painted, whatever the
// size the image is shown at. Painting is by pointer events: a mouse, a pen and a finger
// alike (touch-action: none keeps a finger's stroke from scrolling the page).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const canvas = $("mask");
  const context = canvas.getContext("2d", { willReadFrequently: true });
  const source = $("edit-source");
  // The strokes' colour on screen (the canvas is shown half transparent); only their
  // coverage (alpha) matters for the mask that is sent.
  const PAINT = "#ff2d6f";

  let file = null; // the image as chosen, dropped, pasted or taken from the gallery (a Blob)
  let fileName = "image.png";
  let objectUrl = null;
  let stroke = null; // the pointer painting now and its last point

  function setStatus(text) {
    $("edit-status").textContent = text;
  }

  // Shows the image and a blank mask its size; refuses what the browser cannot show as an
  // image (the server would refuse it too, and there would be nothing to paint on).
  async function load(blob, name) {
    $("error-image").textContent = "";
    $("image").removeAttribute("aria-invalid");
    if (!blob || !(blob.type || "").startsWith("image/")) {
      showImageError("Image must be an image file (PNG, JPEG or WebP)");
      return false;
    }
    const url = URL.createObjectURL(blob);
    const shown = new Image();
    shown.src = url;
    try {
      await shown.decode();
    } catch {
      URL.revokeObjectURL(url);
      showImageError("Image could not be read: it is not an image, or it is truncated");
      return false;
    }
    if (objectUrl) URL.revokeObjectURL(objectUrl);
    objectUrl = url;
    file = blob;
    fileName = name || "image.png";
    source.src = url;
    source.classList.toggle("tiny", Math.max(shown.naturalWidth, shown.naturalHeight) <= 128);
    canvas.width = shown.naturalWidth;
    canvas.height = shown.naturalHeight;
    clearMask();
    $("edit-tools").hidden = false;
    $("edit-stage").style.aspectRatio = `${shown.naturalWidth} / ${shown.naturalHeight}`;
    setStatus(`Editing ${fileName} (${shown.naturalWidth}x${shown.naturalHeight}): ` +
      "paint the mask over what should change.");
    document.dispatchEvent(new Event("imagegen:edit-changed")); // its estimate (app.js)
    return true;
  }

  function showImageError(message) {
    $("error-image").textContent = message;
    $("image").setAttribute("aria-invalid", "true");
  }

  function remove() {
    if (objectUrl) URL.revokeObjectURL(objectUrl);
    objectUrl = null;
    file = null;
    source.removeAttribute("src");
    $("image").value = "";
    $("edit-tools").hidden = true;
    setStatus("No image: Generate starts from the prompt alone.");
    document.dispatchEvent(new Event("imagegen:edit-changed"));
  }

  function clearMask() {
    context.clearRect(0, 0, canvas.width, canvas.height);
  }

  // --- painting ------------------------------------------------------------------------

  function point(event) {
    const box = canvas.getBoundingClientRect();
    return {
      x: ((event.clientX - box.left) * canvas.width) / box.width,
      y: ((event.clientY - box.top) * canvas.height) / box.height,
    };
  }

  function brush() {
    const size = Number($("brush-size").value) || 1;
    context.globalCompositeOperation = $("tool-eraser").checked ? "destination-out" : "source-over";
    context.fillStyle = PAINT;
    context.strokeStyle = PAINT;
    context.lineWidth = size;
    context.lineCap = "round";
    context.lineJoin = "round";
    return size;
  }

  function dot(at) {
    const size = brush();
    context.beginPath();
    context.arc(at.x, at.y, size / 2, 0, 2 * Math.PI);
    context.fill();
  }

  function line(from, to) {
    brush();
    context.beginPath();
    context.moveTo(from.x, from.y);
    context.lineTo(to.x, to.y);
    context.stroke();
  }

  canvas.addEventListener("pointerdown", (event) => {
    if (event.button !== 0 || !file) return;
    event.preventDefault();
    canvas.setPointerCapture(event.pointerId);
    stroke = { id: event.pointerId, last: point(event) };
    dot(stroke.last);
  });
  canvas.addEventListener("pointermove", (event) => {
    if (!stroke || event.pointerId !== stroke.id) return;
    const events = event.getCoalescedEvents ? event.getCoalescedEvents() : [event];
    for (const each of events.length ? events : [event]) {
      const at = point(each);
      line(stroke.last, at);
      stroke.last = at;
    }
  });
  const endStroke = (event) => {
    if (stroke && event.pointerId === stroke.id) stroke = null;
  };
  canvas.addEventListener("pointerup", endStroke);
  canvas.addEventListener("pointercancel", endStroke);

  $("brush-size").addEventListener("input", () => {
    $("brush-size-value").textContent = `${$("brush-size").value} px`;
  });
  $("mask-clear").addEventListener("click", clearMask);
  $("edit-remove").addEventListener("click", () => {
    remove();
    $("image").focus();
  });

  // --- choosing, dropping and pasting an image -------------------------------------------

  $("image").addEventListener("change", () => {
    const chosen = $("image").files[0];
    if (chosen) load(chosen, chosen.name);
  });

  const drop = $("edit");
  drop.addEventListener("dragover", (event) => {
    if (![...event.dataTransfer.types].includes("Files")) return;
    event.preventDefault();
    drop.classList.add("dropping");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("dropping"));
  drop.addEventListener("drop", (event) => {
    drop.classList.remove("dropping");
    const dropped = [...event.dataTransfer.files].find((f) => f.type.startsWith("image/"));
    if (!dropped) return;
    event.preventDefault();
    load(dropped, dropped.name);
  });

  // A pasted image (a screenshot, a copied picture) anywhere on the page; pasted text goes
  // where it always went.
  document.addEventListener("paste", (event) => {
    const data = event.clipboardData;
    const pasted = data && [...data.files].find((f) => f.type.startsWith("image/"));
    if (!pasted) return;
    event.preventDefault();
    load(pasted, pasted.name || "pasted.png");
  });

  // --- what Generate sends ----------------------------------------------------------------

  // The mask as the API takes it: a PNG the image's size, white where painted (grey where a
  // stroke's edge only partly covers a pixel), black elsewhere; null when nothing is painted
  // (then the edit reworks the whole picture: img2img).
  async function maskPng() {
    const painted = context.getImageData(0, 0, canvas.width, canvas.height);
    const out = new ImageData(canvas.width, canvas.height);
    let marked = false;
    for (let i = 0; i < painted.data.length; i += 4) {
      const value = painted.data[i + 3];
      marked = marked || value > 0;
      out.data[i] = value;
      out.data[i + 1] = value;
      out.data[i + 2] = value;
      out.data[i + 3] = 255;
    }
    if (!marked) return null;
    const flat = document.createElement("canvas");
    flat.width = canvas.width;
    flat.height = canvas.height;
    flat.getContext("2d").putImageData(out, 0, 0);
    return new Promise((resolve) => flat.toBlob(resolve, "image/png"));
  }

  window.imagegenEdit = {
    active: () => file !== null,
    // The image's own size, which an edit works at unless a size is given; null: no image.
    size: () => (file === null ? null : { width: canvas.width, height: canvas.height }),
    // The multipart parts of an edit: the image as it was given (its own bytes) and the mask.
    async parts() {
      return { image: file, name: fileName, mask: await maskPng() };
    },
    // The gallery's "Edit": a stored image becomes the source.
    load,
  };
})();
