// The page's script: plain browser JavaScript, no build step, nothing loaded from elsewhere.
// It calls the service's own API routes. Every call goes through fetch() so that the token
// (when the service has one) travels as an Authorization header: EventSource, <img src> and
// download links cannot send headers, so the event stream is read from fetch() and images
// are shown from blob: URLs.
"use strict";

(() => {
  const config = JSON.parse(document.getElementById("ui-config").textContent);
  const TOKEN_KEY = "imagegen.token";
  const FINAL = new Set(["succeeded", "failed", "cancelled"]);
  const $ = (id) => document.getElementById(id);

  // --- access: the token, asked for once per tab --------------------------------------

  let tokenAsked = null; // the pending question, so parallel calls ask only once

  function askToken(message) {
    if (tokenAsked) return tokenAsked;
    const dialog = $("token-dialog");
    $("token-error").textContent = message || "";
    $("token").value = "";
    tokenAsked = new Promise((resolve) => {
      dialog.addEventListener("close", function onClose() {
        dialog.removeEventListener("close", onClose);
        const value = $("token").value.trim();
        tokenAsked = null;
        if (value) {
          sessionStorage.setItem(TOKEN_KEY, value);
          $("forget-token").hidden = false;
          resolve(true);
        } else {
          resolve(false);
        }
      });
    });
    dialog.showModal();
    $("token").focus();
    return tokenAsked;
  }

  // fetch() with the token; a 401 asks for it (again) and repeats the call.
  async function api(path, options = {}) {
    for (;;) {
      const headers = new Headers(options.headers || {});
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (token) headers.set("Authorization", `Bearer ${token}`);
      const response = await fetch(path, { ...options, headers });
      if (response.status !== 401) return response;
      const hadToken = Boolean(token);
      sessionStorage.removeItem(TOKEN_KEY);
      const given = await askToken(hadToken ? "That token was refused; try again." : "");
      if (!given) return response;
    }
  }

  async function errorMessage(response) {
    try {
      const body = await response.json();
      return body.error ? body.error : { message: `${response.status} ${response.statusText}` };
    } catch {
      return { message: `${response.status} ${response.statusText}` };
    }
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  async function blobUrl(path) {
    const response = await api(path);
    if (!response.ok) throw new Error((await errorMessage(response)).message);
    return URL.createObjectURL(await response.blob());
  }

  // --- the form ------------------------------------------------------------------------

  const form = $("generate-form");
  const FIELDS = ["prompt", "negative_prompt", "steps", "guidance", "size", "scheduler", "seed"];
  let lastSeed = null;

  function clearErrors() {
    $("form-error").hidden = true;
    for (const name of FIELDS) {
      $(`error-${name}`).textContent = "";
      $(name).removeAttribute("aria-invalid");
    }
  }

  // The API's own messages, each beside its field; others above the form.
  function showErrors(error) {
    const unplaced = [];
    let first = null;
    for (const detail of error.details || []) {
      const field = FIELDS.includes(detail.field) ? detail.field : null;
      if (!field) {
        unplaced.push(`${detail.field}: ${detail.message}`);
        continue;
      }
      const slot = $(`error-${field}`);
      slot.textContent = slot.textContent ? `${slot.textContent}; ${detail.message}` : detail.message;
      $(field).setAttribute("aria-invalid", "true");
      first = first || $(field);
    }
    if (!error.details || unplaced.length) {
      $("form-error").textContent = unplaced.length ? unplaced.join("; ") : error.message;
      $("form-error").hidden = false;
    }
    (first || $("generate")).focus();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    const data = new URLSearchParams();
    for (const name of FIELDS) {
      const value = $(name).value;
      if (value.trim() !== "") data.set(name, value);
    }
    data.set("async", "true");
    $("generate").disabled = true;
    try {
      const response = await api("/generate", { method: "POST", body: data });
      if (response.status !== 202) {
        showErrors(await errorMessage(response));
        return;
      }
      follow(await response.json());
    } catch (error) {
      showErrors({ message: `The service did not answer: ${error.message}` });
    } finally {
      $("generate").disabled = false;
    }
  });

  $("seed-random").addEventListener("click", () => {
    $("seed").value = "";
    $("seed").focus();
  });
  $("seed-reuse").addEventListener("click", () => {
    if (lastSeed !== null) $("seed").value = String(lastSeed);
    $("seed").focus();
  });

  function useSettings(parameters) {
    $("prompt").value = parameters.prompt;
    $("negative_prompt").value = parameters.negative_prompt || "";
    $("steps").value = String(parameters.steps);
    $("guidance").value = String(parameters.guidance);
    $("size").value = `${parameters.width}x${parameters.height}`;
    $("seed").value = String(parameters.seed);
    // A record names its sampler as the options show it (A1111's name; older ones by id).
    const option = [...$("scheduler").options].find(
      (o) => o.value && (o.value === parameters.scheduler || o.text === parameters.scheduler),
    );
    $("scheduler").value = option ? option.value : "";
    clearErrors();
    $("prompt").focus();
    $("generate-panel").scrollIntoView({ block: "start" });
  }

  // --- the estimate: how long these settings would take now (GET /generate/estimate) ------

  const ESTIMATED = ["steps", "guidance", "size", "scheduler"]; // what decides the time
  let estimateTimer = null;

  async function showEstimate() {
    const query = new URLSearchParams();
    for (const name of ESTIMATED) {
      if ($(name).value.trim() !== "") query.set(name, $(name).value.trim());
    }
    try {
      const response = await api(`/generate/estimate?${query}`);
      $("estimate").textContent = response.ok ? (await response.json()).message : "";
    } catch {
      $("estimate").textContent = "";
    }
  }

  // Once an edit of what decides the time settles.
  form.addEventListener("input", (event) => {
    if (!ESTIMATED.includes(event.target.id)) return;
    clearTimeout(estimateTimer);
    estimateTimer = setTimeout(showEstimate, 300);
  });

  // --- this job: its event stream ------------------------------------------------------

  let current = null; // {id, controller}
  let announcedTenth = -1;

  function announce(text) {
    $("job-status").textContent = text;
  }

  function showProgress(step, steps, eta) {
    const bar = $("job-progress");
    bar.max = Math.max(steps, 1);
    bar.value = step;
    const left = eta === null || eta === undefined ? "" : `, about ${Math.ceil(eta)} s left`;
    const text = steps ? `Step ${step} of ${steps}${left}` : "";
    $("job-steps").textContent = text;
    bar.setAttribute("aria-valuetext", text || "not started");
    // The live region speaks at each tenth of the steps (10 % to 90 %), not at every step.
    const tenth = steps ? Math.floor((10 * step) / steps) : 0;
    if (tenth > announcedTenth && tenth >= 1 && tenth < 10) {
      announcedTenth = tenth;
      announce(`Running: ${text}`);
    }
  }

  function describeJob(job) {
    if (job.state === "queued") return `Queued: position ${job.position}`;
    if (job.state === "running") return `Running: ${job.phase}`;
    if (job.state === "failed") return `Failed: ${job.error}`;
    if (job.state === "cancelled") return "Cancelled";
    return `Done in ${job.progress.elapsed_seconds} s (seed ${job.parameters.seed})`;
  }

  async function onJobEvent(name, data) {
    if (name === "step") {
      showProgress(data.step, data.steps, data.eta_seconds);
      return;
    }
    announce(describeJob(data));
    showProgress(data.progress.step, data.progress.steps, data.progress.eta_seconds);
    lastSeed = data.parameters.seed;
    $("seed-reuse").disabled = false;
    if (FINAL.has(name)) {
      $("cancel").disabled = true;
      $("job-steps").textContent = "";
      if (name === "succeeded") await showResult(data.image);
      refreshModel();
    }
  }

  async function showResult(record) {
    const url = await blobUrl(`/images/${record.id}.png`);
    const p = record.parameters;
    $("result-image").src = url;
    $("result-image").alt = `Generated image: ${p.prompt}`;
    $("result-caption").textContent = describeParameters(p);
    $("result-download").href = url;
    $("result-download").download = `${record.id}.png`;
    $("result").hidden = false;
    addToGallery(record, url, true);
  }

  // Server-Sent Events from a fetch() body: blocks separated by a blank line.
  function parseBlock(block) {
    const event = { name: "message", id: null, data: [], retry: null };
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event.name = value;
      else if (field === "id") event.id = value;
      else if (field === "data") event.data.push(value);
      else if (field === "retry") event.retry = Number(value);
    }
    return event;
  }

  // One job's events until its final state. The server ends a stream before the ingress
  // would cut it, and the page resumes at once after the last event received
  // (Last-Event-ID); after a network error it waits the stream's `retry` time first.
  async function follow(job) {
    if (current) current.controller.abort();
    const controller = new AbortController();
    current = { id: job.id, controller };
    announcedTenth = -1;
    $("result").hidden = true;
    $("cancel").disabled = false;
    onJobEvent(job.state, job);
    let lastId = null;
    let retryMs = 1000;
    try {
      for (;;) {
        const headers = lastId ? { "Last-Event-ID": lastId } : {};
        let response;
        try {
          response = await api(`/jobs/${job.id}/events`, { headers, signal: controller.signal });
        } catch (error) {
          if (error.name === "AbortError") throw error;
          announce("Reconnecting to this job's events…");
          await sleep(retryMs);
          continue;
        }
        if (response.status === 503) {
          announce("Waiting for a free event stream…");
          await sleep(1000 * Number(response.headers.get("Retry-After") || 5));
          continue;
        }
        if (!response.ok) {
          announce(`Lost this job: ${(await errorMessage(response)).message}`);
          $("cancel").disabled = true;
          return;
        }
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let finished = false;
        for (;;) {
          let chunk;
          try {
            chunk = await reader.read();
          } catch (error) {
            if (error.name === "AbortError") throw error;
            await sleep(retryMs); // cut mid-stream: resume after the last event received
            break;
          }
          if (chunk.done) break;
          buffer += chunk.value.replace(/\r\n?/g, "\n");
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const event = parseBlock(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
            if (event.retry !== null) retryMs = event.retry;
            if (!event.data.length) continue;
            if (event.id !== null) lastId = event.id;
            await onJobEvent(event.name, JSON.parse(event.data.join("\n")));
            if (FINAL.has(event.name)) finished = true;
          }
        }
        if (finished) return; // the server closes the stream right after the final state
      }
    } catch (error) {
      if (error.name !== "AbortError") announce(`The event stream failed: ${error.message}`);
    } finally {
      if (current && current.controller === controller) current = null;
    }
  }

  $("cancel").addEventListener("click", async () => {
    if (!current) return;
    $("cancel").disabled = true;
    const response = await api(`/jobs/${current.id}`, { method: "DELETE" });
    if (!response.ok && response.status !== 409) {
      announce(`Could not cancel: ${(await errorMessage(response)).message}`);
      $("cancel").disabled = false;
    }
    // The stream reports the outcome: `cancelled`, or the state it reached first.
  });

  // --- gallery ---------------------------------------------------------------------------

  let galleryNext = null;
  const shown = new Set();

  function describeParameters(p) {
    return [
      `${p.width}x${p.height}`,
      `${p.steps} steps`,
      `guidance ${p.guidance}`,
      `seed ${p.seed}`,
      `sampler ${p.scheduler}`,
    ].join(" · ");
  }

  function addToGallery(record, url, first) {
    if (shown.has(record.id)) return;
    shown.add(record.id);
    const item = $("gallery-item").content.firstElementChild.cloneNode(true);
    item.dataset.imageId = record.id;
    const image = item.querySelector("img");
    image.alt = record.parameters.prompt;
    item.querySelector(".prompt").textContent = record.parameters.prompt;
    item.querySelector(".params").textContent = describeParameters(record.parameters);
    const download = item.querySelector(".download");
    download.download = `${record.id}.png`;
    download.setAttribute("aria-label", `Download ${record.parameters.prompt}`);
    const reuse = item.querySelector(".reuse");
    reuse.setAttribute("aria-label", `Use these settings: ${record.parameters.prompt}`);
    reuse.addEventListener("click", () => useSettings(record.parameters));
    const list = $("gallery");
    if (first) list.prepend(item);
    else list.append(item);
    $("gallery-empty").hidden = true;
    const loaded = url ? Promise.resolve(url) : blobUrl(`/images/${record.id}.png`);
    loaded.then((src) => {
      image.src = src;
      download.href = src;
    }, () => {
      image.alt = `${record.parameters.prompt} (image unavailable)`;
    });
  }

  async function loadGallery(path) {
    const more = $("gallery-more");
    more.disabled = true;
    try {
      const response = await api(path);
      if (!response.ok) {
        $("gallery-empty").textContent = (await errorMessage(response)).message;
        $("gallery-empty").hidden = false;
        return;
      }
      const page = await response.json();
      for (const record of page.items) addToGallery(record, null, false);
      galleryNext = page.next;
      more.hidden = !galleryNext;
      if (!shown.size) {
        $("gallery-empty").textContent = "No images yet.";
        $("gallery-empty").hidden = false;
      }
    } finally {
      more.disabled = false;
    }
  }

  $("gallery-more").addEventListener("click", () => galleryNext && loadGallery(galleryNext));

  // --- the model panel -----------------------------------------------------------------

  let pulling = false;

  function formatBytes(n) {
    const units = ["B", "kB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) {
      n /= 1000;
      i += 1;
    }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  function showModel(status) {
    $("model-id").textContent = status.model_id;
    $("model-state").textContent = status.state;
    $("model-share").textContent = status.weights_on_share ? "yes" : "no";
    const download = status.download;
    $("model-detail").textContent =
      status.state === "downloading"
        ? `Downloaded ${formatBytes(download.bytes_done)} of ${formatBytes(download.bytes_total)}`
        : "";
    $("model-error").textContent = status.state === "failed" ? status.error || "failed" : "";
    $("model-pull").disabled = status.state === "ready" || status.state === "downloading" ||
      status.state === "loading";
  }

  async function refreshModel() {
    const response = await fetch("/model/status"); // open, as for the platform's probes
    if (!response.ok) return null;
    const status = await response.json();
    showModel(status);
    return status;
  }

  // A pull runs in the background for minutes: the panel looks again every second until it
  // ends (the only repeated request of the page, and only while a pull it started runs).
  async function watchPull() {
    if (pulling) return;
    pulling = true;
    try {
      for (;;) {
        const status = await refreshModel();
        if (!status || !["downloading", "loading"].includes(status.state)) return;
        await sleep(1000);
      }
    } finally {
      pulling = false;
    }
  }

  $("model-pull").addEventListener("click", async () => {
    $("model-pull").disabled = true;
    const response = await api("/model/pull", { method: "POST" });
    if (!response.ok) {
      $("model-error").textContent = (await errorMessage(response)).message;
      $("model-pull").disabled = false;
      return;
    }
    showModel(await response.json());
    watchPull();
  });
  $("model-refresh").addEventListener("click", refreshModel);

  $("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("forget-token").hidden = true;
  });

  // --- start -----------------------------------------------------------------------------

  async function start() {
    $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
    refreshModel();
    if (config.tokenRequired && !sessionStorage.getItem(TOKEN_KEY)) await askToken("");
    showEstimate();
    await loadGallery(`/images?limit=${config.galleryPage}`);
  }

  start();
})();
