// The playground: an image (a file, a drop, or one of the packaged examples), a question, a policy or
// a model, the options a request may set; the reply's answer, route, plan, tokens and timeline.

import { call } from "./api.js";
import { count, el, hook, seconds } from "./dom.js";
import { renderTrace, renderTraceId, renderUntraced } from "./timeline.js";

let image = null; // { dataUrl, name }
let targets = new Map(); // the policy select's value -> { policy } or { model }

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
async function preview(blob) {
  const canvas = hook("preview");
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
    context.font = "13px sans-serif";
    context.fillText("no preview:", 10, 70);
    context.fillText("not an image this", 10, 88);
    context.fillText("browser can read", 10, 106);
    return false;
  }
}

let picking = 0; // the latest image picked: an earlier one still loading is dropped

/** Take `blob` as the image to send (Ask waits until it is read). */
export async function useImage(blob, name) {
  const pick = ++picking;
  hook("ask").disabled = true;
  try {
    const dataUrl = await readAsDataUrl(blob);
    if (pick !== picking) return;
    const readable = await preview(blob);
    if (pick !== picking) return;
    image = { dataUrl, name };
    hook("image-name").textContent = `${name} · ${count(blob.size)} bytes${readable ? "" : " · not readable as an image here"}`;
  } catch (error) {
    if (pick === picking) showError(`The image could not be read: ${error.message}`);
  } finally {
    if (pick === picking) hook("ask").disabled = false;
  }
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
  return said.join(" · ");
}

async function askPolicy(policy, question, options) {
  const body = { image: image ? image.dataUrl : "", question, policy };
  if (Object.keys(options).length) body.options = options;
  const { data } = await call("v1/mai/answer", { method: "POST", body });
  const trace = data.trace;
  hook("reply").textContent = JSON.stringify(data, null, 2);
  showAnswer({ question, answer: data.answer, route: data.route, plan: planText(trace), latency: seconds(trace.latency_s), note: notes(trace) });
  tokensTable(trace.tokens);
  renderTrace(hook("timeline"), trace);
  renderTraceId(hook("trace-ref"), trace.trace_id);
}

async function askModel(model, question) {
  const content = [{ type: "text", text: question }];
  if (image) content.unshift({ type: "image_url", image_url: { url: image.dataUrl } });
  const started = performance.now();
  const { data, headers } = await call("v1/chat/completions", {
    method: "POST",
    body: { model, messages: [{ role: "user", content }] },
  });
  const took = (performance.now() - started) / 1000;
  hook("reply").textContent = JSON.stringify(data, null, 2);
  const usage = data.usage ?? null;
  showAnswer({
    question,
    answer: data.choices?.[0]?.message?.content ?? "",
    route: headers.get("x-mai-route") ?? "passthrough",
    plan: "none: the request went to the model unchanged",
    latency: `${seconds(took)} (timed by this page)`,
    note: `${model} answered directly: no cascade ran, so there is no trace.`,
  });
  tokensTable(usage ? { [model]: { prompt_tokens: usage.prompt_tokens, cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0, completion_tokens: usage.completion_tokens } } : {});
  renderUntraced(hook("timeline"), { model, seconds: took, usage });
  renderTraceId(hook("trace-ref"), null);
}

async function ask(event) {
  event.preventDefault();
  clearResult();
  const button = hook("ask");
  const waiting = hook("waiting");
  const target = targets.get(hook("policy").value);
  const question = hook("question").value;
  const options = {};
  if (hook("plan").value && !hook("plan").disabled) options.plan = hook("plan").value;
  const selector = hook("selector").value.trim();
  if (selector && !hook("selector").disabled) options.transfer_selector = selector;
  button.disabled = true;
  const started = performance.now();
  const timer = setInterval(() => {
    const elapsed = (performance.now() - started) / 1000;
    waiting.textContent = `waiting ${elapsed.toFixed(0)} s${elapsed > 10 ? " (the models may still be loading)" : ""}`;
  }, 1000);
  try {
    if (!target) throw new Error("no policy or model to ask: the server's /v1/models list did not load");
    if (target.model) await askModel(target.model, question);
    else await askPolicy(target.policy, question, options);
  } catch (error) {
    showError(error.message);
  } finally {
    clearInterval(timer);
    waiting.textContent = "";
    button.disabled = false;
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
      targets.set(value, { policy: entry.policy });
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
  const input = hook("image");
  input.addEventListener("change", () => {
    if (input.files.length) useImage(input.files[0], input.files[0].name);
  });
  const drop = hook("drop");
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const file = event.dataTransfer.files[0];
    if (file) useImage(file, file.name);
  });
  hook("ask-form").addEventListener("submit", ask);
  loadExamples();
}
