// The page's script: plain browser JavaScript, no build step, nothing loaded from elsewhere.
// It calls the service's own API routes. Every call goes through fetch() so that the token
// (when the service has one) travels as an Authorization header: <img src> and download
// links cannot send headers, so images are shown from blob: URLs.
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
      // A refusal of a token already replaced (answered late) is that token's: go again.
      const now = sessionStorage.getItem(TOKEN_KEY);
      if (now && now !== token) continue;
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

  // --- the form: kept in this browser, Ctrl+Enter, a batch count ------------------------

  const form = $("generate-form");
  const FIELDS = [
    "prompt", "model", "negative_prompt", "steps", "guidance", "size", "scheduler", "seed",
  ];
  // The API's fields and the page's own batch count: what is kept across reloads and what
  // an error can be shown beside.
  const EDIT_FIELDS = ["strength", "mask_blur"]; // sent only with an image (mask.js)
  const FORM_FIELDS = [...FIELDS, ...EDIT_FIELDS, "count"];
  // Where the API's refusals can be shown: the fields above and the edit's file parts.
  const ERROR_FIELDS = [...FORM_FIELDS, "image", "mask"];
  const FORM_KEY = "imagegen.form";
  let lastSeed = null;
  let formWaitsForModel = false; // the form's message is about the model (formAdvice)
  // Blank as the API's rule has it (config/text.py): nothing in it would show.
  const BLANK = /^[\s\p{Cc}\p{Cf}\p{Mn}\p{Me}\p{Z}]*$/u;

  // localStorage, not sessionStorage: a prompt being written survives a reload, a closed
  // tab and a crash. It is what the person typed, never an answer of the API.
  function saveForm() {
    const values = Object.fromEntries(FORM_FIELDS.map((name) => [name, $(name).value]));
    localStorage.setItem(FORM_KEY, JSON.stringify(values));
  }

  function restoreForm() {
    let values;
    try {
      values = JSON.parse(localStorage.getItem(FORM_KEY)) || {};
    } catch {
      return;
    }
    for (const name of FORM_FIELDS) {
      if (typeof values[name] !== "string") continue;
      const field = $(name);
      // A scheduler the model's preset no longer offers falls back to the default.
      if (field.tagName === "SELECT" && ![...field.options].some((o) => o.value === values[name])) {
        continue;
      }
      field.value = values[name];
    }
  }

  form.addEventListener("input", saveForm);
  form.addEventListener("change", saveForm);
  form.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  function clearErrors() {
    formWaitsForModel = false;
    $("form-error").hidden = true;
    for (const name of ERROR_FIELDS) clearFieldError(name);
  }

  function clearFieldError(name) {
    $(`error-${name}`).textContent = "";
    $(name).removeAttribute("aria-invalid");
  }

  // A field's message is about the value it was refused for: a new value takes it away
  // (the next answer says whether the new one is taken).
  for (const type of ["input", "change"]) {
    form.addEventListener(type, (event) => {
      if (ERROR_FIELDS.includes(event.target.id)) clearFieldError(event.target.id);
    });
  }

  // The API's own messages, each beside its field; others above the form.
  function showErrors(error) {
    const unplaced = [];
    let first = null;
    for (const detail of error.details || []) {
      const field = ERROR_FIELDS.includes(detail.field) ? detail.field : null;
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
    if (!error.details) adviseForModel();
  }

  // A refusal of the whole request may be the model's (not pulled, downloading, failed): the
  // API's message then says what a client should call; the page says what to press instead.
  async function adviseForModel() {
    const status = await refreshModel();
    if (!status || !formAdvice(chosenStatus(status))) return; // not the model's: it stays
    formWaitsForModel = true;
    showModel(status);
    watchPull(); // a pull under way (from any client): the message follows it to the end
  }

  // An empty or blank prompt is refused here, in words for a person, before any request.
  function refuseBlankPrompt() {
    if (!BLANK.test($("prompt").value)) return false;
    const message = "Enter a prompt";
    showErrors({ message, details: [{ field: "prompt", message }] });
    return true;
  }

  // The batch count is the page's own field (the native route makes one image a request),
  // so it is the one the page checks itself, by the bound the server rendered (GEN_MAX_N).
  function batchCount() {
    const text = $("count").value.trim();
    const count = text === "" ? 1 : Number(text);
    if (Number.isInteger(count) && count >= 1 && count <= config.countMax) return count;
    showErrors({
      details: [{
        field: "count",
        message: `Batch count must be a whole number from 1 to ${config.countMax} (GEN_MAX_N)`,
      }],
    });
    return null;
  }

  // One job per image, as the OpenAI and A1111 routes make them: seed, seed+1, ... when a
  // seed is given (wrapping past the largest), else each draws its own. A refusal part-way
  // stops there; the jobs already queued stay in the Queue panel, where they can be cancelled.
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    if (refuseBlankPrompt()) return;
    const count = batchCount();
    if (count === null) return;
    const data = await requestBody();
    const seed = data.get("seed");
    $("generate").disabled = true;
    try {
      for (let index = 0; index < count; index += 1) {
        if (seed !== null && index > 0) {
          data.set("seed", String((Number(seed) + index) % (config.seedMax + 1)));
        }
        const response = await api("/generate", { method: "POST", body: data });
        if (response.status !== 202) {
          showErrors(await errorMessage(response));
          if (index) announce(`${index} of ${count} jobs queued; the next was refused.`);
          return;
        }
        const job = await response.json();
        if (index === 0) {
          lastSeed = job.parameters.seed;
          $("seed-reuse").disabled = false;
        }
        showJob(job);
      }
    } catch (error) {
      showErrors({ message: `The service did not answer: ${error.message}` });
    } finally {
      $("generate").disabled = false;
      pollQueue();
    }
  });

  // The form's fields; with an image (mask.js), multipart with the image, its mask (when
  // one is painted) and the edit's own fields, which the API refuses without an image.
  async function requestBody() {
    const edit = window.imagegenEdit && window.imagegenEdit.active();
    const data = edit ? new FormData() : new URLSearchParams();
    for (const name of edit ? [...FIELDS, ...EDIT_FIELDS] : FIELDS) {
      const value = $(name).value;
      if (value.trim() !== "") data.set(name, value);
    }
    data.set("async", "true");
    if (edit) {
      const parts = await window.imagegenEdit.parts();
      data.set("image", parts.image, parts.name);
      if (parts.mask) data.set("mask", parts.mask, "mask.png");
    }
    return data;
  }

  $("seed-random").addEventListener("click", () => {
    $("seed").value = "";
    saveForm();
    $("seed").focus();
  });
  $("seed-reuse").addEventListener("click", () => {
    if (lastSeed !== null) $("seed").value = String(lastSeed);
    saveForm();
    $("seed").focus();
  });

  function useSettings(parameters) {
    $("prompt").value = promptWithLoras(parameters);
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
    chooseModel(parameters.model_id);
    saveForm();
    clearErrors();
    $("prompt").focus();
    $("generate-panel").scrollIntoView({ block: "start" });
  }

  // --- the estimate: how long these settings would take now (GET /generate/estimate) ------

  // What decides the time; an edit's strength and its image's size too (mask.js).
  const ESTIMATED = ["steps", "guidance", "size", "scheduler", "strength"];
  let estimateTimer = null;
  let estimateAsked = 0; // the latest ask: an older answer arriving after it is dropped

  // The page sends every request asynchronously (requestBody), so the limit a synchronous
  // request meets is not the page's: past it, the page says it will queue it.
  async function showEstimate() {
    const query = new URLSearchParams();
    const edit = window.imagegenEdit && window.imagegenEdit.size();
    for (const name of ESTIMATED) {
      if (name === "strength" && !edit) continue;
      if ($(name).value.trim() !== "") query.set(name, $(name).value.trim());
    }
    if (edit) query.set("image_size", `${edit.width}x${edit.height}`);
    const asked = ++estimateAsked;
    let text = "";
    try {
      const response = await api(`/generate/estimate?${query}`);
      const found = response.ok ? await response.json() : null;
      if (found) {
        text = !found.about ? found.message : found.refused
          ? `${found.about}. Too long to wait for, so Generate queues it: follow it in the ` +
            "Queue panel."
          : found.about;
      }
    } catch {
      text = "";
    }
    if (asked === estimateAsked) $("estimate").textContent = text;
  }

  function estimateSoon() {
    clearTimeout(estimateTimer);
    estimateTimer = setTimeout(showEstimate, 300);
  }

  // Once an edit of what decides the time settles, or an image is chosen or removed.
  form.addEventListener("input", (event) => {
    if (ESTIMATED.includes(event.target.id)) estimateSoon();
  });
  document.addEventListener("imagegen:edit-changed", estimateSoon);

  // The jobs ahead count: asked again whenever the jobs under way change (one ended, one
  // was queued, one moved up), so no figure of a queue that has emptied stays. Null until the
  // first listing: the estimate asked at the start may count jobs that ended before it.
  let queueSeen = null;
  function estimateAfterQueue() {
    const seen = [...queue.values()]
      .filter((job) => !FINAL.has(job.state))
      .map((job) => `${job.id}:${job.state}:${job.position}`)
      .join(",");
    if (seen === queueSeen) return;
    queueSeen = seen;
    showEstimate();
  }

  // --- the Queue panel: every job under way, followed with one poll ----------------------
  //
  // One request, GET /jobs?unfinished=true, once a second while anything is under way and
  // every few seconds otherwise (to see other clients' jobs), only while the tab is shown.
  // Not an event stream per job: each holds one of the server's few stream places
  // (EVENT_STREAMS_MAX) and a worker thread for as long as it is open. A job that leaves the
  // list has ended: it is read once (GET /jobs/<id>); a succeeded one leaves the panel for
  // the gallery, a failed or cancelled one stays until dismissed. The ids shown are kept in
  // localStorage, so an ended job is still shown after a reload.

  const POLL_BUSY_MS = 1000;
  const POLL_IDLE_MS = 5000;
  const QUEUE_KEY = "imagegen.queue";
  const queue = new Map(); // job id -> the job as GET /jobs answered it last
  const announcedTenth = new Map(); // job id -> the last tenth of its steps spoken
  let unresolved = new Set(storedQueue()); // shown before the reload, not yet read again
  let pollTimer = null;
  let polling = false;
  let pollAgain = false;

  function storedQueue() {
    try {
      const ids = JSON.parse(localStorage.getItem(QUEUE_KEY));
      return Array.isArray(ids) ? ids.filter((id) => typeof id === "string") : [];
    } catch {
      return [];
    }
  }

  function saveQueue() {
    localStorage.setItem(QUEUE_KEY, JSON.stringify([...queue.keys(), ...unresolved]));
  }

  function announce(text) {
    $("queue-status").textContent = text;
  }

  function describeJob(job) {
    if (job.state === "queued") return `Queued: position ${job.position}`;
    if (job.state === "running") return `Running: ${job.phase}`;
    if (job.state === "failed") return `Failed: ${job.error}`;
    if (job.state === "cancelled") return "Cancelled";
    return `Done in ${job.progress.elapsed_seconds} s (seed ${job.parameters.seed})`;
  }

  function stepsText(job) {
    const { step, steps, eta_seconds: eta } = job.progress;
    if (job.state !== "running" || !steps) return "";
    const left = eta === null || eta === undefined ? "" : `, about ${Math.ceil(eta)} s left`;
    return `Step ${step} of ${steps}${left}`;
  }

  // The job's webhook (the answer's `webhook`, only when it named one): its last delivery.
  function webhookText(job) {
    const hook = job.webhook;
    if (!hook) return "";
    if (hook.state === "waiting") return "Webhook: told when it ends";
    const tries = hook.tries.length;
    const last = hook.tries[tries - 1];
    if (!last) return `Webhook ${hook.state}`;
    const answer = last.status === null ? last.error || "no answer" : `HTTP ${last.status}`;
    return `Webhook ${hook.state}: ${tries} ${tries === 1 ? "try" : "tries"}, last ${answer}`;
  }

  // Whose it is: the service names the key (`owner`) only to an admin key while named keys
  // are on; a key that sees only its own is told nothing, and shown nothing.
  function showOwner(item, owner) {
    const label = item.querySelector(".owner");
    label.hidden = !owner;
    label.textContent = owner ? `by ${owner}` : "";
  }

  function jobItem(job) {
    const found = $("queue").querySelector(`li[data-job-id="${CSS.escape(job.id)}"]`);
    if (found) return found;
    const item = $("queue-item").content.firstElementChild.cloneNode(true);
    const prompt = job.parameters.prompt;
    item.dataset.jobId = job.id;
    item.dataset.created = job.created_at;
    item.querySelector(".job-prompt").textContent = prompt;
    // A job naming no model runs MODEL_ID's (its parameters carry `model` only for another).
    item.querySelector(".job-model").textContent =
      `Model: ${job.parameters.model || config.defaultModel}`;
    showOwner(item, job.owner);
    item.querySelector(".job-progress").setAttribute("aria-label", `Progress: ${prompt}`);
    item.querySelector(".cancel").setAttribute("aria-label", `Cancel: ${prompt}`);
    item.querySelector(".dismiss").setAttribute("aria-label", `Dismiss: ${prompt}`);
    item.querySelector(".cancel").addEventListener("click", () => cancelJob(job.id));
    item.querySelector(".dismiss").addEventListener("click", () => dismissJob(job.id));
    // In the order they were submitted (the order they run in); never moved once shown, so
    // a focused button keeps its focus.
    const later = [...$("queue").children].find((li) => li.dataset.created > job.created_at);
    $("queue").insertBefore(item, later || null);
    return item;
  }

  // The picture as it forms: the job's latest preview (PREVIEW on the server), fetched when
  // its step changes, shown in the job's place while it runs. A cancelled job keeps its last
  // one, captioned, so a person sees what was stopped.
  async function showPreview(job, item) {
    const figure = item.querySelector(".job-preview");
    const caption = figure.querySelector("figcaption");
    if (job.state === "cancelled" && figure.dataset.step) {
      caption.textContent = `Cancelled at step ${figure.dataset.step}`;
      return;
    }
    if (!job.preview_url || FINAL.has(job.state)) return;
    const step = String(job.preview_step);
    if (figure.dataset.step === step || figure.dataset.loading === step) return;
    figure.dataset.loading = step;
    try {
      const url = await blobUrl(job.preview_url);
      const img = figure.querySelector("img");
      if (img.src) URL.revokeObjectURL(img.src);
      img.src = url;
      img.alt = `Preview at step ${step}: ${job.parameters.prompt}`;
      figure.dataset.step = step;
      caption.textContent = `Preview at step ${step} of ${job.progress.steps}`;
      figure.hidden = false;
      const shown = queue.get(job.id);
      if (shown && shown.state === "cancelled") showPreview(shown, item);
    } catch {
      // a preview is a nicety: the next poll tries again
    } finally {
      delete figure.dataset.loading;
    }
  }

  function renderJob(job) {
    const item = jobItem(job);
    const ended = FINAL.has(job.state);
    showPreview(job, item);
    item.dataset.state = job.state;
    item.querySelector(".job-state").textContent = describeJob(job);
    const steps = stepsText(job);
    item.querySelector(".job-steps").textContent = steps;
    const hook = item.querySelector(".job-webhook");
    hook.textContent = webhookText(job);
    hook.hidden = !hook.textContent;
    const bar = item.querySelector(".job-progress");
    bar.max = Math.max(job.progress.steps, 1);
    bar.value = job.progress.step;
    bar.setAttribute("aria-valuetext", steps || describeJob(job));
    bar.hidden = ended;
    const cancel = item.querySelector(".cancel");
    const dismiss = item.querySelector(".dismiss");
    const hadFocus = document.activeElement === cancel;
    cancel.hidden = ended;
    if (job.phase.startsWith("cancelling")) cancel.setAttribute("aria-disabled", "true");
    dismiss.hidden = !ended;
    if (ended && hadFocus) dismiss.focus(); // the keyboard's place is not lost
    $("queue-empty").hidden = queue.size > 0;
  }

  // The live region speaks at each change of state and at each tenth of a running job's
  // steps (10 % to 90 %), not at every step.
  function speak(job, before) {
    const prompt = job.parameters.prompt;
    if (!before || before.state !== job.state || before.position !== job.position) {
      announce(`${describeJob(job)}: ${prompt}`);
      return;
    }
    const { step, steps } = job.progress;
    const tenth = job.state === "running" && steps ? Math.floor((10 * step) / steps) : 0;
    if (tenth >= 1 && tenth < 10 && tenth > (announcedTenth.get(job.id) ?? 0)) {
      announcedTenth.set(job.id, tenth);
      announce(`Running: ${stepsText(job)}: ${prompt}`);
    }
  }

  function showJob(job) {
    const before = queue.get(job.id);
    unresolved.delete(job.id);
    if (job.state === "succeeded") {
      // Seen under way here: its image joins the gallery now. One that ended while the page
      // was away is in the gallery's own listing already.
      if (before) {
        announce(`${describeJob(job)}: ${job.parameters.prompt}`);
        addToGallery({ ...job.image, owner: job.owner }, null, true);
      }
      forgetJob(job.id);
      return;
    }
    queue.set(job.id, job);
    renderJob(job);
    speak(job, before);
    saveQueue();
  }

  function forgetJob(id) {
    queue.delete(id);
    unresolved.delete(id);
    announcedTenth.delete(id);
    const item = $("queue").querySelector(`li[data-job-id="${CSS.escape(id)}"]`);
    if (item) item.remove();
    $("queue-empty").hidden = queue.size > 0;
    saveQueue();
  }

  async function pollQueue() {
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    clearTimeout(pollTimer);
    let ended = false;
    try {
      const response = await api("/jobs?unfinished=true&limit=200");
      if (!response.ok) {
        $("queue-error").textContent =
          `The queue could not be read: ${(await errorMessage(response)).message}`;
        return;
      }
      const listed = await response.json();
      const ids = new Set(listed.map((job) => job.id));
      for (const job of listed) showJob(job);
      // Shown as under way (or before the reload) and no longer listed: it has ended.
      const gone = [...queue.values()].filter((job) => !FINAL.has(job.state) && !ids.has(job.id));
      for (const id of [...gone.map((job) => job.id), ...unresolved]) {
        if (ids.has(id)) continue;
        const answer = await api(`/jobs/${encodeURIComponent(id)}`);
        if (answer.ok) {
          showJob(await answer.json());
          ended = true;
        } else if (answer.status === 404) {
          forgetJob(id); // forgotten by the service (JOBS_KEEP, a restart)
        }
      }
      $("queue-error").textContent = "";
    } catch (error) {
      $("queue-error").textContent = `The service did not answer: ${error.message}`;
    } finally {
      polling = false;
      if (ended) refreshModel(); // the model may have been loaded by the job
      estimateAfterQueue();
      if (pollAgain) {
        pollAgain = false;
        pollQueue();
      } else {
        schedulePoll();
      }
    }
  }

  function schedulePoll() {
    clearTimeout(pollTimer);
    if (document.hidden) return; // resumed when the tab is shown again
    const busy = [...queue.values()].some((job) => !FINAL.has(job.state));
    pollTimer = setTimeout(pollQueue, busy ? POLL_BUSY_MS : POLL_IDLE_MS);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) clearTimeout(pollTimer);
    else pollQueue();
  });

  // While a cancel is on its way the button is aria-disabled, not disabled: a disabled
  // button loses the focus, and the keyboard's place should move on to Dismiss instead.
  async function cancelJob(id) {
    const item = $("queue").querySelector(`li[data-job-id="${CSS.escape(id)}"]`);
    const button = item && item.querySelector(".cancel");
    if (!button || button.getAttribute("aria-disabled") === "true") return;
    button.setAttribute("aria-disabled", "true");
    const response = await api(`/jobs/${encodeURIComponent(id)}`, { method: "DELETE" });
    if (response.ok) {
      showJob(await response.json()); // cancelled, or running with "cancelling: ..."
    } else if (response.status !== 409) { // 409: it ended meanwhile; the poll shows how
      announce(`Could not cancel: ${(await errorMessage(response)).message}`);
      button.removeAttribute("aria-disabled");
    }
    pollQueue();
  }

  function dismissJob(id) {
    const items = [...$("queue").children];
    const place = items.findIndex((li) => li.dataset.jobId === id);
    forgetJob(id);
    // Focus stays in the list: on the next job's button, else the panel's heading.
    const next = items[place + 1] || items[place - 1];
    const target = next && next.isConnected && next.querySelector("button:not([hidden])");
    (target || $("queue-heading")).focus();
  }

  // Dismissed in another tab of this browser: gone here too.
  window.addEventListener("storage", (event) => {
    if (event.key !== QUEUE_KEY) return;
    const kept = new Set(storedQueue());
    for (const job of [...queue.values()]) {
      if (FINAL.has(job.state) && !kept.has(job.id)) forgetJob(job.id);
    }
  });

  // --- gallery ---------------------------------------------------------------------------

  let galleryNext = null;
  const shown = new Set();
  // Images no larger than this on their longer side (the demo's and the tests' 64 px) are
  // shown scaled up with their pixels kept sharp; every other is drawn smoothly.
  const TINY_SIDE = 128;

  function describeParameters(p) {
    return [
      `${p.width}x${p.height}`,
      `${p.steps} steps`,
      `guidance ${p.guidance}`,
      `seed ${p.seed}`,
      `sampler ${p.scheduler}`,
      ...(p.edit ? [`edited: strength ${p.edit.strength}${p.edit.mask ? ", masked" : ""}`] : []),
    ].join(" · ");
  }

  function markTiny(image) {
    const tiny = () => image.classList.toggle(
      "tiny", Math.max(image.naturalWidth, image.naturalHeight) <= TINY_SIDE,
    );
    if (image.complete && image.naturalWidth) tiny();
    else image.addEventListener("load", tiny, { once: true });
  }

  function addToGallery(record, url, first) {
    if (shown.has(record.id)) return;
    shown.add(record.id);
    const item = $("gallery-item").content.firstElementChild.cloneNode(true);
    item.dataset.imageId = record.id;
    const prompt = record.parameters.prompt;
    const image = item.querySelector("img");
    image.alt = prompt;
    item.querySelector(".prompt").textContent = prompt;
    item.querySelector(".model").textContent = `Model: ${record.parameters.model_id}`;
    showOwner(item, record.owner);
    item.querySelector(".params").textContent = describeParameters(record.parameters);
    showLorasRan(item.querySelector(".loras"), record.parameters);
    const download = item.querySelector(".download");
    download.download = `${record.id}.png`;
    download.setAttribute("aria-label", `Download ${prompt}`);
    const reuse = item.querySelector(".reuse");
    reuse.setAttribute("aria-label", `Use these settings: ${prompt}`);
    reuse.addEventListener("click", () => useSettings(record.parameters));
    const edit = item.querySelector(".edit");
    edit.setAttribute("aria-label", `Edit: ${prompt}`);
    edit.addEventListener("click", () => editImage(record));
    showSource(record, item);
    wireUpscale(item, record);
    const view = item.querySelector(".view");
    view.setAttribute("aria-label", `View larger: ${prompt}`);
    view.addEventListener("click", () => openViewer(record, item));
    const remove = item.querySelector(".delete");
    remove.setAttribute("aria-label", `Delete: ${prompt}`);
    remove.addEventListener("click", () => deleteImage(record));
    const list = $("gallery");
    if (first) list.prepend(item);
    else list.append(item);
    $("gallery-empty").hidden = true;
    markTiny(image);
    const loaded = url ? Promise.resolve(url) : blobUrl(`/images/${record.id}.png`);
    loaded.then((src) => {
      image.src = src;
      download.href = src;
    }, () => {
      image.alt = `${prompt} (image unavailable)`;
    });
  }

  // An edit's record links its source (GET /images/inputs/<sha256>): shown beside the result,
  // each captioned so the two are told apart (a text-to-image card has its one image).
  function showSource(record, item) {
    const edit = record.parameters.edit;
    if (!edit) return;
    const image = document.createElement("img");
    image.className = "source";
    image.alt = `Source: ${record.parameters.prompt}`;
    image.title = "The source image";
    const result = captioned(item.querySelector(".view"), "Result");
    item.querySelector(".pair").replaceChildren(result, captioned(image, "Source"));
    markTiny(image);
    blobUrl(edit.source.url).then((src) => {
      image.src = src;
    }, () => {
      image.alt = `Source: ${record.parameters.prompt} (unavailable)`;
    });
  }

  function captioned(content, text) {
    const figure = document.createElement("figure");
    const caption = document.createElement("figcaption");
    caption.className = "hint";
    caption.textContent = text;
    figure.append(content, caption);
    return figure;
  }

  // "Edit": the stored image becomes the form's source (mask.js), to paint a mask on.
  async function editImage(record) {
    $("gallery-status").textContent = "";
    const response = await api(`/images/${encodeURIComponent(record.id)}.png`);
    if (!response.ok) {
      $("gallery-status").textContent =
        `Could not load the image: ${(await errorMessage(response)).message}`;
      return;
    }
    const blob = await response.blob();
    if (await window.imagegenEdit.load(blob, `${record.id}.png`)) {
      clearErrors();
      $("edit").scrollIntoView({ block: "start" });
      $("image").focus();
    }
  }

  // --- upscale: a card's image at twice its size, a job like any other (POST /upscale) ----

  const UPSCALE_BY = 2;

  // The card's Upscale button; an upscaled card says what ran beside its parameters.
  function wireUpscale(item, record) {
    const ran = record.parameters.upscale;
    if (ran) {
      item.querySelector(".params").textContent += ` · upscaled ${ran.scale}x with ${ran.upscaler}`;
    }
    const button = item.querySelector(".upscale");
    button.setAttribute("aria-label", `Upscale ${UPSCALE_BY}x: ${record.parameters.prompt}`);
    button.addEventListener("click", () => upscaleImage(record));
  }

  // The service's default upscaler (its first UPSCALERS entry, else Lanczos) on the stored
  // image; the job joins the Queue panel, and its image the gallery when it is done.
  async function upscaleImage(record) {
    $("gallery-status").textContent = "";
    const data = new URLSearchParams({
      image_id: record.id, scale: String(UPSCALE_BY), async: "true",
    });
    try {
      const response = await api("/upscale", { method: "POST", body: data });
      if (response.status !== 202) {
        $("gallery-status").textContent =
          `Could not upscale: ${(await errorMessage(response)).message}`;
        return;
      }
      const job = await response.json();
      if (job.state === "succeeded") { // done before its answer was written
        addToGallery({ ...job.image, owner: job.owner }, null, true);
        return;
      }
      showJob(job);
      const item = $("queue").querySelector(`li[data-job-id="${CSS.escape(job.id)}"]`);
      if (item) {
        item.querySelector(".job-prompt").textContent =
          `Upscale ${UPSCALE_BY}x: ${record.parameters.prompt}`;
      }
    } catch (error) {
      $("gallery-status").textContent = `The service did not answer: ${error.message}`;
    } finally {
      pollQueue();
    }
  }

  function galleryCard(id) {
    return $("gallery").querySelector(`li[data-image-id="${CSS.escape(id)}"]`);
  }

  // --- the larger view and deleting an image ----------------------------------------------

  let viewing = null; // the record shown

  function openViewer(record, item) {
    const src = item.querySelector("img").src;
    const image = $("viewer-image");
    image.classList.remove("tiny");
    image.src = src;
    image.alt = `Generated image: ${record.parameters.prompt}`;
    markTiny(image);
    $("viewer-heading").textContent = record.parameters.prompt;
    $("viewer-params").textContent = describeParameters(record.parameters);
    showLorasRan($("viewer-loras"), record.parameters);
    $("viewer-download").href = src;
    $("viewer-download").download = `${record.id}.png`;
    const source = item.querySelector("img.source");
    $("viewer-source").hidden = !source;
    $("viewer-source-figure").hidden = !source;
    $("viewer-result-caption").hidden = !source; // "Result" only beside a source
    if (source) {
      $("viewer-source").src = source.src;
      $("viewer-source").alt = source.alt;
      $("viewer-source").classList.toggle("tiny", source.classList.contains("tiny"));
    } else {
      $("viewer-source").removeAttribute("src");
    }
    viewing = record;
    // A modal dialog gives the focus back to the image's button when it closes.
    $("viewer").showModal();
    $("viewer-close").focus();
  }

  $("viewer-close").addEventListener("click", () => $("viewer").close());
  $("viewer").addEventListener("close", () => {
    viewing = null;
  });
  $("viewer-delete").addEventListener("click", () => viewing && deleteImage(viewing));

  async function deleteImage(record) {
    const prompt = record.parameters.prompt;
    if (!window.confirm(`Delete this image for good?\n\n${prompt}`)) return;
    const response = await api(`/images/${encodeURIComponent(record.id)}`, { method: "DELETE" });
    if (!response.ok && response.status !== 404) { // 404: deleted already, by anyone
      $("gallery-status").textContent =
        `Could not delete: ${(await errorMessage(response)).message}`;
      return;
    }
    const item = galleryCard(record.id);
    if (viewing && viewing.id === record.id) $("viewer").close();
    if (item) {
      const next = item.nextElementSibling || item.previousElementSibling;
      for (const image of item.querySelectorAll("img")) URL.revokeObjectURL(image.src);
      item.remove();
      if (next) next.querySelector(".view").focus(); // the keyboard's place is not lost
    }
    $("gallery-status").textContent = `Deleted: ${prompt}`;
    if (!$("gallery").children.length && !galleryNext) {
      $("gallery-empty").textContent = "No images yet.";
      $("gallery-empty").hidden = false;
    }
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

  // What a pull downloads: the service's own figure once a pull has listed the files
  // (kept after a failure), before that the documented one for the model (null: unknown).
  function pullSize(status) {
    const bytes = status.download.bytes_total || (status.default ? config.pullBytes : null);
    return bytes ? `about ${formatBytes(bytes)}` : null;
  }

  // Pull says what it does before it is pressed: a download of gigabytes, or a load.
  function pullLabel(status) {
    if (status.state === "ready") return "Pull";
    if (status.weights_on_share) return "Pull (load from the share)";
    const size = pullSize(status);
    return size ? `Pull (download ${size})` : "Pull (download; the size shows once it starts)";
  }

  // What a person can do in the model's state, said in the panel.
  function modelAdvice(status) {
    const download = status.download;
    const size = pullSize(status);
    switch (status.state) {
      case "not_started":
        if (status.weights_on_share) {
          return "On the share, not loaded yet: press Pull to load it now, or Generate " +
            "(the first image loads it).";
        }
        return `Not downloaded yet: press Pull to download it from the model hub${
          size ? ` (${size})` : ""}.`;
      case "downloading":
        if (!download.bytes_total) return "Downloading from the model hub.";
        return `Downloaded ${formatBytes(download.bytes_done)} of ${
          formatBytes(download.bytes_total)}`;
      case "loading":
        return "Loading the model into memory; a Generate waits for it.";
      case "failed":
        return "Press Pull to try again.";
      default:
        return "";
    }
  }

  // The form's message after Generate was refused because of the model ("" once it is
  // ready): it follows the model's state, so it never outlives what it is about.
  function formAdvice(status) {
    switch (status.state) {
      case "not_started":
        if (status.weights_on_share) return ""; // Generate loads it
        return "The model is not downloaded yet: press Pull in the Model panel first.";
      case "downloading":
        return "The model is still downloading: Generate again once the Model panel says ready.";
      case "loading":
        return "The model is loading: Generate again in a moment.";
      case "failed":
        return "The model could not be pulled: the Model panel says why; press Pull there " +
          "to try again.";
      default:
        return "";
    }
  }

  // --- the offered models: the picker, each one's state and Pull, its preset's hints ---------

  let lastStatus = null; // /model/status's latest answer: the picker's change shows it at once
  const BUSY = ["downloading", "loading"];

  // The chosen model as the panel shows it: MODEL_ID's is the top level (with its download
  // figures and error); another's is its entry in `models`.
  function chosenStatus(status) {
    const entry = (status.models || []).find((m) => m.id === $("model").value);
    if (!entry || entry.default) return { ...status, default: true };
    return {
      model_id: entry.id, state: entry.state, weights_on_share: entry.weights_on_share,
      download: {}, error: null, default: false,
    };
  }

  // A model's state in the picker's words; the weights' word is the Model panel's (a share
  // only in distributed mode).
  function stateWords(entry) {
    if (entry.state === "ready" || entry.resident) return "loaded";
    if ([...BUSY, "failed"].includes(entry.state)) return entry.state;
    return entry.weights_on_share ? config.weightsWord : `not ${config.weightsWord}`;
  }

  function modelEntry(entry) {
    const list = $("model-list");
    const found = list.querySelector(`li[data-model-id="${CSS.escape(entry.id)}"]`);
    if (found) return found;
    const item = $("model-item").content.firstElementChild.cloneNode(true);
    item.dataset.modelId = entry.id;
    item.querySelector(".model-name").textContent = entry.id;
    const pull = item.querySelector(".model-entry-pull");
    pull.setAttribute("aria-label", `Pull ${entry.id}`);
    pull.addEventListener("click", () => pullModel(entry.id, pull));
    list.append(item);
    return item;
  }

  // With one model offered the picker shows it (what Generate runs) and no list: the Model
  // panel below says its state and has its Pull.
  function showModels(status) {
    $("model-list").hidden = (status.models || []).length < 2;
    for (const entry of status.models || []) {
      const item = modelEntry(entry);
      const words = stateWords(entry);
      item.dataset.state = entry.state;
      item.querySelector(".model-entry-state").textContent = words;
      item.querySelector(".model-entry-pull").disabled =
        entry.state === "ready" || BUSY.includes(entry.state);
      const option = [...$("model").options].find((o) => o.value === entry.id);
      if (option) option.textContent = `${entry.id} (${words})`;
    }
    const chosen = (status.models || []).find((m) => m.id === $("model").value);
    if (chosen) showPreset(chosen.preset);
  }

  // Python's way with a float (7.0, 5.5), as the server rendered the hints at first.
  const decimal = (value) => (Number.isInteger(value) ? value.toFixed(1) : String(value));

  // The form's hints say what the chosen model's preset gives an empty field, and its caps;
  // the bounds (GEN_MAX_*, GEN_MIN_SIDE, GEN_MAX_SIDE) are every model's.
  function showPreset(preset) {
    const { steps, guidance, max_steps: stepsCap, max_guidance: guidanceCap } = preset;
    $("steps").placeholder = String(steps);
    $("hint-steps").textContent = `1 to ${config.stepsMax}${
      stepsCap ? `; above ${stepsCap} lowered to ${stepsCap}` : ""}. Empty: ${steps}.`;
    $("guidance").placeholder = decimal(guidance);
    $("hint-guidance").textContent = `0 to ${config.guidanceMax}${
      guidanceCap === null ? "" : `; above ${decimal(guidanceCap)} lowered to ${
        decimal(guidanceCap)}`}. Empty: ${decimal(guidance)}.`;
    const native = preset.native_size ? preset.native_size.join("x") : null;
    $("size").placeholder = native ? `native ${native}` : "model's native";
    $("hint-size").textContent = `WIDTHxHEIGHT, multiples of 8, ${config.minSide} to ${
      config.maxSide}. Empty: the model's native size${native ? ` (${native})` : ""}. With an ` +
      "image, empty keeps the image's size.";
    $("scheduler").options[0].textContent = `Default (${
      preset.scheduler ? config.samplers[preset.scheduler] : "the model's own"})`;
    $("hint-scheduler").textContent =
      preset.name ? `Model preset: ${preset.name}.` : "No model preset.";
  }

  // A record's model chosen again ("Use these settings"), when it is still offered.
  function chooseModel(id) {
    if (![...$("model").options].some((o) => o.value === id)) return;
    $("model").value = id;
    if (lastStatus) showModel(lastStatus);
  }

  $("model").addEventListener("change", () => {
    if (lastStatus) showModel(lastStatus);
    refreshModel();
  });

  function showModel(raw) {
    lastStatus = raw;
    showModels(raw);
    lorasFollowModels(raw);
    const status = chosenStatus(raw);
    $("model-id").textContent = status.model_id;
    $("model-state").textContent = status.state;
    $("model-share").textContent = status.weights_on_share ? "yes" : "no";
    $("model-detail").textContent = modelAdvice(status);
    $("model-error").textContent = status.state === "failed" ? status.error || "failed" : "";
    $("model-pull").textContent = pullLabel(status);
    $("model-pull").disabled = status.state === "ready" || status.state === "downloading" ||
      status.state === "loading";
    if (formWaitsForModel) {
      const advice = formAdvice(status);
      $("form-error").textContent = advice;
      $("form-error").hidden = !advice;
      formWaitsForModel = Boolean(advice);
    }
  }

  async function refreshModel() {
    const response = await fetch("/model/status"); // open, as for the platform's probes
    if (!response.ok) return null;
    const status = await response.json();
    showModel(status);
    return status;
  }

  // A pull runs in the background for minutes: the panel looks again every second until it
  // ends (the only repeated request of the page, and only while a pull runs that it started
  // or that a Generate of its was refused for).
  async function watchPull() {
    if (pulling) return;
    pulling = true;
    try {
      for (;;) {
        const status = await refreshModel();
        const states = [status && status.state, ...((status && status.models) || []).map(
          (m) => m.state)];
        if (!status || !states.some((state) => BUSY.includes(state))) return;
        await sleep(1000);
      }
    } finally {
      pulling = false;
    }
  }

  // MODEL_ID's pull sends no model (the API's pull of the default); another's names it.
  async function pullModel(id, button) {
    button.disabled = true;
    const named = id && id !== config.defaultModel;
    const response = await api("/model/pull", named
      ? { method: "POST", body: new URLSearchParams({ model: id }) }
      : { method: "POST" });
    if (!response.ok) {
      $("model-error").textContent = (await errorMessage(response)).message;
      button.disabled = false;
      return;
    }
    showModel(await response.json());
    watchPull();
  }

  $("model-pull").addEventListener("click", () => pullModel($("model").value, $("model-pull")));
  $("model-refresh").addEventListener("click", refreshModel);

  // --- the LoRAs: those that fit the chosen model, each tag added to the prompt ----------
  //
  // GET /sdapi/v1/loras lists every offered LoRA with the offered models it fits (`models`:
  // the service matches its layers against each model's on the share). The list shows those
  // of the chosen model; it is read again when a model's or the LoRAs' place on the share
  // changes (a pull) and when "Look for new LoRA files" has the service look for dropped ones.

  const LORA_TAG = /<lora:([^:>]*)(?::([^>]*))?>/gi; // the service's own (prompt_tags.py)
  let loras = null; // the service's latest list (null: not read yet)
  let lorasFollowed = null; // the models' places and states it was read at
  let lorasRefreshing = false;

  async function loadLoras() {
    try {
      const response = await api("/sdapi/v1/loras");
      if (!response.ok) {
        $("lora-error").textContent =
          `The LoRAs could not be read: ${(await errorMessage(response)).message}`;
        return;
      }
      loras = await response.json();
      $("lora-error").textContent = "";
    } catch (error) {
      $("lora-error").textContent = `The service did not answer: ${error.message}`;
      return;
    }
    showLoras();
  }

  function showLoras() {
    if (loras === null) return;
    const model = $("model").value;
    const fitting = loras.filter((lora) => (lora.models || []).includes(model));
    const list = $("lora-list");
    const names = fitting.map((lora) => lora.name);
    // Rebuilt only when the names change, so a focused Add keeps its focus.
    if ([...list.children].map((li) => li.dataset.loraName).join("\n") !== names.join("\n")) {
      list.replaceChildren(...fitting.map(loraItem));
    }
    list.hidden = !fitting.length;
    $("lora-empty").textContent = fitting.length ? "" : noLoraText();
  }

  // A LoRA's fit is found from the model's files: a model not yet there fits none so far.
  function noLoraText() {
    if (!loras.length) {
      return "No LoRA is offered (LORAS, or .safetensors files dropped into MODEL_DIR/loras/ " +
        "and then \u201cLook for new LoRA files\u201d).";
    }
    const there = lastStatus ? chosenStatus(lastStatus).weights_on_share : true;
    return `No offered LoRA fits this model.${
      there ? "" : ` Those that fit it show once it is ${config.weightsWord}.`}`;
  }

  function loraItem(lora) {
    const item = $("lora-item").content.firstElementChild.cloneNode(true);
    item.dataset.loraName = lora.name;
    item.querySelector(".lora-name").textContent = lora.name;
    const add = item.querySelector(".lora-add");
    add.setAttribute("aria-label", `Add ${lora.name} to the prompt`);
    add.addEventListener("click", () => addLoraTag(lora.name));
    return item;
  }

  // The tag goes where the prompt's cursor is, replacing a selection (a prompt never focused
  // has it at the end of its text), with a space on each side the text lacks.
  function addLoraTag(name) {
    const prompt = $("prompt");
    const { value, selectionStart: start, selectionEnd: end } = prompt;
    const before = start > 0 && !/\s/.test(value[start - 1]) ? " " : "";
    const after = end < value.length && !/\s/.test(value[end]) ? " " : "";
    prompt.setRangeText(`${before}<lora:${name}:1>${after}`, start, end, "end");
    prompt.focus();
    prompt.dispatchEvent(new Event("input", { bubbles: true })); // kept, its error cleared
  }

  // Read again once a model or the LoRAs land on the share (or leave it): what fits changes.
  function lorasFollowModels(status) {
    const seen = [status, ...(status.models || [])]
      .map((m) => `${m.id || m.model_id}:${m.weights_on_share}:${m.state}`)
      .join(",");
    if (loras !== null && lorasFollowed !== null && seen !== lorasFollowed) loadLoras();
    lorasFollowed = seen;
    showLoras();
  }

  $("model").addEventListener("change", showLoras);

  // The service looks again for files dropped into MODEL_DIR/loras/ (A1111's refresh).
  $("lora-refresh").addEventListener("click", async () => {
    if (lorasRefreshing) return;
    lorasRefreshing = true;
    try {
      const response = await api("/sdapi/v1/refresh-loras", { method: "POST" });
      if (!response.ok) {
        $("lora-error").textContent =
          `Could not look for LoRA files: ${(await errorMessage(response)).message}`;
        return;
      }
      await loadLoras();
    } catch (error) {
      $("lora-error").textContent = `The service did not answer: ${error.message}`;
    } finally {
      lorasRefreshing = false;
    }
  });

  // The LoRAs an image ran with and their weights (its record's `loras`).
  function showLorasRan(element, parameters) {
    const ran = parameters.loras || [];
    element.textContent = ran.length
      ? `LoRAs: ${ran.map((lora) => `${lora.name} at ${lora.weight}`).join(", ")}`
      : "";
    element.hidden = !ran.length;
  }

  // "Use these settings" keeps an image's LoRAs: a LoRA it ran that its prompt names in no
  // tag (a client may send them as fields) gets its tag added at the end.
  function promptWithLoras(parameters) {
    const named = new Set(
      [...parameters.prompt.matchAll(LORA_TAG)].map((match) => match[1].trim().toLowerCase()),
    );
    const missing = (parameters.loras || []).filter(
      (lora) => !named.has(lora.name.toLowerCase()),
    );
    return [parameters.prompt, ...missing.map((lora) => `<lora:${lora.name}:${lora.weight}>`)]
      .join(" ");
  }

  $("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    // The prompts kept for the next visit go with it: they are the person's, like the token.
    localStorage.removeItem(FORM_KEY);
    $("prompt").value = "";
    $("negative_prompt").value = "";
    $("forget-token").hidden = true;
  });

  // --- start -----------------------------------------------------------------------------

  async function start() {
    restoreForm();
    $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
    refreshModel();
    if (config.tokenRequired && !sessionStorage.getItem(TOKEN_KEY)) await askToken("");
    showEstimate();
    loadLoras();
    await loadGallery(`/images?limit=${config.galleryPage}`);
    await pollQueue();
  }

  start();
})();
