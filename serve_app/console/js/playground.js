// The playground: one or two images (a file, a drop, or one of the packaged examples), a question, a
// policy or a model, the options a request may set; the reply's answer, route, plan, tokens and
// timeline. A conversation: "Follow up" keeps the question and its answer as turns that the next
// question is sent after; "New conversation" forgets them.

import { call } from "./api.js";
import { count, el, hook, seconds } from "./dom.js";
import { renderTrace, renderTraceId, renderUntraced } from "./timeline.js";

// The images a question may carry here: the drop box's, and the one "Add image" adds. The server's
// `limits.max_images` bounds a whole conversation's, and its 400 says so.
const SLOTS = [
  { input: "image", preview: "preview", name: "image-name", chosen: null },
  { input: "image-2", preview: "preview-2", name: "image-2-name", chosen: "image-2-chosen" },
];
const images = [null, null]; // per slot: { dataUrl, name, blob }
const picking = [0, 0]; // per slot, the latest image picked: an earlier one still loading is dropped
const loading = new Set(); // the slots whose image is being read (Ask waits)
let asking = false;
let targets = new Map(); // the policy select's value -> { policy, id } or { model }

// The conversation the next question is sent after: { role: "user", text, images } and
// { role: "assistant", text } (the answer as received), alternating from a user turn.
let conversation = [];
let last = null; // the latest answered question, { question, images, answer }, until Follow up keeps it

function readAsDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

/** Draw `blob` into the preview canvas; a file the browser cannot read as an image is still sent,
 * so that the server says what is wrong with it. */
async function preview(canvas, blob) {
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, canvas.width, canvas.height);
  try {
    const bitmap = await createImageBitmap(blob);
    const scale = Math.min(canvas.width / bitmap.width, canvas.height / bitmap.height);
    const width = bitmap.width * scale;
    const height = bitmap.height * scale;
    context.imageSmoothingEnabled = false;
    context.drawImage(bitmap, (canvas.width - width) / 2, (canvas.height - height) / 2, width, height);
    return true;
  } catch {
    context.fillStyle = "#6b7280";
    if (canvas.width < 100) {
      context.fillRect(0, 0, canvas.width, canvas.height);
      return false;
    }
    context.font = "13px sans-serif";
    context.fillText("no preview:", 10, 70);
    context.fillText("not an image this", 10, 88);
    context.fillText("browser can read", 10, 106);
    return false;
  }
}

function settleAsk() {
  hook("ask").disabled = asking || loading.size > 0;
  hook("new-conversation").disabled = asking;
}

/** Take `blob` as the image of `slot` (0: the drop box, 1: "Add image"); Ask waits until it is read. */
export async function useImage(blob, name, slot = 0) {
  const pick = ++picking[slot];
  const { preview: canvas, name: label, chosen } = SLOTS[slot];
  loading.add(slot);
  settleAsk();
  try {
    const dataUrl = await readAsDataUrl(blob);
    if (pick !== picking[slot]) return;
    const readable = await preview(hook(canvas), blob);
    if (pick !== picking[slot]) return;
    images[slot] = { dataUrl, name, blob };
    hook(label).textContent = `${name} · ${count(blob.size)} bytes${readable ? "" : " · not readable as an image here"}`;
    if (chosen) hook(chosen).hidden = false;
  } catch (error) {
    if (pick === picking[slot]) showError(`The image could not be read: ${error.message}`);
  } finally {
    if (pick === picking[slot]) {
      loading.delete(slot);
      settleAsk();
    }
  }
}

/** Empty `slot`: no image, its preview blank, its file input cleared (the same file may be chosen
 * again); `said` is what the drop box says instead. */
function clearImage(slot, said) {
  picking[slot] += 1;
  loading.delete(slot);
  images[slot] = null;
  const { input, preview: canvas, name, chosen } = SLOTS[slot];
  hook(canvas).getContext("2d").clearRect(0, 0, hook(canvas).width, hook(canvas).height);
  hook(input).value = "";
  hook(name).textContent = said ?? SLOTS[slot].empty;
  if (chosen) hook(chosen).hidden = true;
  settleAsk();
}

function showError(message) {
  const box = hook("error");
  box.textContent = message;
  box.hidden = false;
}

function clearResult() {
  hook("error").hidden = true;
  hook("result").hidden = true;
}

/** The conversation above the question box: each turn's text (as text) and a thumbnail per image. */
function renderConversation() {
  const items = conversation.map((turn) => {
    const item = el("li", { class: `turn turn-${turn.role}`, "data-mai": "turn", "data-role": turn.role }, el("span", { class: "turn-role" }, turn.role === "user" ? "Asked" : "Answer"));
    for (const image of turn.images ?? []) {
      const thumb = el("canvas", { class: "thumb", width: 32, height: 32, role: "img", "aria-label": image.name, title: image.name, "data-mai": "turn-image" });
      preview(thumb, image.blob);
      item.append(thumb);
    }
    item.append(el("span", { class: "turn-text" }, turn.role === "assistant" && turn.text === "" ? "(no answer read)" : turn.text));
    return item;
  });
  hook("turns").replaceChildren(...items);
  hook("conversation").hidden = conversation.length === 0;
}

/** Keep the latest question and its answer as the conversation's next two turns: the next question
 * is sent after them, with no image of its own unless one is chosen. */
function followUp() {
  if (!last) return;
  conversation.push({ role: "user", text: last.question, images: last.images }, { role: "assistant", text: last.answer });
  last = null;
  hook("follow-up").disabled = true;
  renderConversation();
  clearImage(0, "No image of its own: a follow-up is sent after the conversation's images. Drop or choose one to add it.");
  clearImage(1);
  hook("question").value = "";
  hook("question").focus();
}

function newConversation() {
  conversation = [];
  last = null;
  hook("follow-up").disabled = true;
  renderConversation();
  if (!images[0] && !loading.has(0)) hook(SLOTS[0].name).textContent = SLOTS[0].empty;
}

/** A user turn's content: its images, in order, then its text. */
function userContent(text, turnImages) {
  return [...turnImages.map((image) => ({ type: "image_url", image_url: { url: image.dataUrl } })), { type: "text", text }];
}

/** The chat messages of `question` with `turnImages`, after the turns of `context`. */
function messagesOf(context, question, turnImages) {
  const earlier = context.map((turn) => (turn.role === "user" ? { role: "user", content: userContent(turn.text, turn.images) } : { role: "assistant", content: turn.text }));
  return [...earlier, { role: "user", content: userContent(question, turnImages) }];
}

/** The trace's `context_turns` and `images` beside the answer, when the trace has them. */
function showShape(trace) {
  for (const [name, value] of [["context-turns", trace?.context_turns], ["trace-images", trace?.images]]) {
    const shown = typeof value === "number";
    hook(name).textContent = shown ? String(value) : "";
    hook(name).parentElement.hidden = !shown;
  }
}

function tokensTable(tokens) {
  const table = hook("tokens");
  const rows = Object.entries(tokens ?? {}).map(([model, t]) =>
    el("tr", {}, el("th", { scope: "row" }, model), el("td", {}, count(t.prompt_tokens)), el("td", {}, count(t.cached_tokens)), el("td", {}, count(t.completion_tokens))),
  );
  table.replaceChildren(
    el("thead", {}, el("tr", {}, el("th", {}, "tokens"), el("th", {}, "prompt"), el("th", {}, "of them cached"), el("th", {}, "completion"))),
    el("tbody", {}, ...rows),
  );
}

function showAnswer({ question, answer, route, plan, latency, note }) {
  hook("asked").textContent = question;
  hook("answer").textContent = answer === "" ? "(no answer read)" : answer;
  hook("route").textContent = route;
  hook("plan-used").textContent = plan;
  hook("latency").textContent = latency;
  hook("note").textContent = note;
  hook("result").hidden = false;
}

function planText(trace) {
  if (!trace.plan) return `none: policy ${trace.policy} is not the cascade`;
  return trace.plan_reason ? `${trace.plan} (${trace.plan_reason})` : trace.plan;
}

function notes(trace) {
  const said = [];
  if (trace.fallback) said.push(`the route's own answer (${trace.fallback.stage}: ${trace.fallback.answer ?? "none"}) was not valid for a ${trace.kind} question; ${trace.fallback.served}'s was served`);
  if (trace.answer_valid === false) said.push(`no stage gave a valid ${trace.kind} answer`);
  if (trace.options_named?.length) said.push(`the question names its options: ${trace.options_named.join(" / ")}`);
  if (trace.overload) said.push(`the large model was overloaded (${trace.overload.level})`);
  const cache = trace.cache;
  if (cache?.status === "hit") said.push(`answered from the answer cache (${cache.age_s ?? 0} s old)`);
  if (cache?.status === "coalesced") said.push(`shared the run of request ${cache.coalesced_with}, asked at the same time`);
  return said.join(" · ");
}

/** A policy's reply: the answer, its trace and the rest, shown; the answer as received. */
function showPolicyReply(data, question, { answer, route, trace }) {
  hook("reply").textContent = JSON.stringify(data, null, 2);
  showAnswer({ question, answer, route, plan: planText(trace), latency: seconds(trace.latency_s), note: notes(trace) });
  showShape(trace);
  tokensTable(trace.tokens);
  renderTrace(hook("timeline"), trace);
  renderTraceId(hook("trace-ref"), trace.trace_id);
  return answer;
}

/** Ask a policy: one image and no conversation through `/v1/mai/answer`; a follow-up or two images
 * as a chat request for the policy's model name, which for `mai` asks the cascade itself
 * (`mai.destination`), so that a conversation it does not take is refused with the API's message. */
async function askPolicy(target, question, options, context, turnImages) {
  if (!context.length && turnImages.length <= 1) {
    const body = { image: turnImages.length ? turnImages[0].dataUrl : "", question, policy: target.policy };
    if (Object.keys(options).length) body.options = options;
    const { data } = await call("v1/mai/answer", { method: "POST", body });
    return showPolicyReply(data, question, { answer: data.answer, route: data.route, trace: data.trace });
  }
  const mai = {};
  if (Object.keys(options).length) mai.options = options;
  if (target.id === "mai") mai.destination = "cascade";
  const body = { model: target.id, messages: messagesOf(context, question, turnImages) };
  if (Object.keys(mai).length) body.mai = mai;
  const { data } = await call("v1/chat/completions", { method: "POST", body });
  if (!data.mai || !data.mai.trace) throw new Error(`The server answered ${target.id} without its trace (no mai object in the reply): is this MAI Serve?`);
  const answer = data.choices?.[0]?.message?.content ?? data.mai.answer ?? "";
  return showPolicyReply(data, question, { answer, route: data.mai.route, trace: data.mai.trace });
}

async function askModel(model, question, context, turnImages) {
  const started = performance.now();
  const { data, headers } = await call("v1/chat/completions", {
    method: "POST",
    body: { model, messages: messagesOf(context, question, turnImages) },
  });
  const took = (performance.now() - started) / 1000;
  hook("reply").textContent = JSON.stringify(data, null, 2);
  const usage = data.usage ?? null;
  const answer = data.choices?.[0]?.message?.content ?? "";
  const sent = context.length ? ` The question was sent after the ${context.length} turns of the conversation.` : "";
  showAnswer({
    question,
    answer,
    route: headers.get("x-mai-route") ?? "passthrough",
    plan: "none: the request went to the model unchanged",
    latency: `${seconds(took)} (timed by this page)`,
    note: `${model} answered directly: no cascade ran, so there is no trace.${sent}`,
  });
  showShape(null);
  tokensTable(usage ? { [model]: { prompt_tokens: usage.prompt_tokens, cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0, completion_tokens: usage.completion_tokens } } : {});
  renderUntraced(hook("timeline"), { model, seconds: took, usage });
  renderTraceId(hook("trace-ref"), null);
  return answer;
}

async function ask(event) {
  event.preventDefault();
  clearResult();
  const waiting = hook("waiting");
  const target = targets.get(hook("policy").value);
  const question = hook("question").value;
  const context = conversation.slice();
  const turnImages = images.filter(Boolean);
  const options = {};
  if (hook("plan").value && !hook("plan").disabled) options.plan = hook("plan").value;
  const selector = hook("selector").value.trim();
  if (selector && !hook("selector").disabled) options.transfer_selector = selector;
  asking = true;
  last = null;
  hook("follow-up").disabled = true;
  settleAsk();
  const started = performance.now();
  const timer = setInterval(() => {
    const elapsed = (performance.now() - started) / 1000;
    waiting.textContent = `waiting ${elapsed.toFixed(0)} s${elapsed > 10 ? " (the models may still be loading)" : ""}`;
  }, 1000);
  try {
    if (!target) throw new Error("no policy or model to ask: the server's /v1/models list did not load");
    const answer = target.model ? await askModel(target.model, question, context, turnImages) : await askPolicy(target, question, options, context, turnImages);
    last = { question, images: turnImages, answer };
    hook("follow-up").disabled = false;
  } catch (error) {
    const sent = context.length ? `\nThis question was sent after the ${context.length} turns of the conversation above, their images included; "New conversation" starts afresh.` : "";
    showError(`${error.message}${sent}`);
  } finally {
    clearInterval(timer);
    waiting.textContent = "";
    asking = false;
    settleAsk();
    const form = hook("ask-form");
    form.dataset.done = String(Number(form.dataset.done ?? 0) + 1); // requests finished: for tests
  }
}

/** The policies (`mai` first) and the models of `/v1/models`, in the policy select. */
export function setTargets(models) {
  const select = hook("policy");
  targets = new Map();
  const options = [];
  for (const entry of models) {
    const value = entry.id;
    if (entry.policy) {
      targets.set(value, { policy: entry.policy, id: entry.id });
      options.push(el("option", { value }, entry.id === "mai" ? "mai (the cascade)" : `${entry.id} (baseline: ${entry.policy})`));
    } else {
      targets.set(value, { model: entry.id });
      options.push(el("option", { value }, `${entry.id} (passthrough to the model)`));
    }
  }
  const chosen = select.value;
  select.replaceChildren(...options);
  if (targets.has(chosen)) select.value = chosen;
  fitOptions();
}

/** The plans and transfer selectors this server offers (`/console/settings.json`). */
export function setOptions(settings) {
  hook("plan").replaceChildren(el("option", { value: "" }, "the server's choice"), ...settings.plans.map((plan) => el("option", { value: plan }, plan)));
  hook("selectors").replaceChildren(...settings.transfer_selectors.map((name) => el("option", { value: name })));
}

/** The question forms the demo models learnt, one button each that puts it in the question box. */
function showForms(forms, source) {
  const box = hook("forms");
  box.replaceChildren();
  if (!forms.length) return;
  box.append(el("span", { class: "muted", title: source }, "Forms the demo models learnt:"));
  for (const form of forms) {
    const button = el("button", { type: "button", class: "form", title: `a ${form.form.replace("_", "/")} question` }, form.question);
    button.addEventListener("click", () => {
      hook("question").value = form.question;
    });
    box.append(button);
  }
}

async function loadExamples() {
  const box = hook("examples");
  try {
    const response = await fetch("console/examples/examples.json");
    const { examples, forms, forms_source } = await response.json();
    showForms(forms || [], forms_source || "");
    for (const example of examples) {
      const url = `console/examples/${example.file}`;
      const button = el("button", { type: "button", class: "example", title: `${example.question} (the dataset says: ${example.dataset_answer})` }, el("img", { src: url, alt: `example ${example.file}: ${example.question}`, "data-file": example.file, width: 40, height: 40 }));
      button.addEventListener("click", async () => {
        hook("question").value = example.question;
        try {
          const response = await fetch(url);
          if (!response.ok) throw new Error(`HTTP ${response.status}`);
          await useImage(await response.blob(), example.file);
        } catch (error) {
          showError(`The example ${example.file} could not be loaded: ${error.message}`);
        }
      });
      box.append(button);
    }
  } catch (error) {
    box.textContent = `examples not loaded: ${error.message}`;
  }
}

/** The options a request to `target` may set: the plan for the cascade, the selector for the plans
 * and policies that transfer; a model id gets the request unchanged. */
function fitOptions() {
  const target = targets.get(hook("policy").value);
  const policy = target?.policy;
  hook("plan").disabled = policy !== "cascade";
  hook("selector").disabled = policy !== "cascade" && policy !== "transfer";
}

export function startPlayground() {
  // A file dropped anywhere else must not make the browser leave the page (and forget the key).
  for (const type of ["dragover", "drop"]) document.addEventListener(type, (event) => event.preventDefault());
  hook("policy").addEventListener("change", fitOptions);
  SLOTS.forEach((slot, i) => {
    slot.empty = hook(slot.name).textContent;
    const input = hook(slot.input);
    input.addEventListener("change", () => {
      if (input.files.length) useImage(input.files[0], input.files[0].name, i);
    });
  });
  hook("image-2-clear").addEventListener("click", () => clearImage(1));
  hook("follow-up").addEventListener("click", followUp);
  hook("new-conversation").addEventListener("click", newConversation);
  const drop = hook("drop");
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    // Two files dropped at once: the first in the box, the second as the added image.
    [...event.dataTransfer.files].slice(0, SLOTS.length).forEach((file, i) => useImage(file, file.name, i));
  });
  hook("ask-form").addEventListener("submit", ask);
  loadExamples();
}
