// The console's start: what the server offers, the API key when it asks for one, then the playground
// and the live view. Nothing of the server's is shown before the API answers with the key.

import { ApiError, call, onUnauthorized, setApiKey } from "./api.js";
import { hook } from "./dom.js";
import { startLive } from "./live.js";
import { setOptions, setTargets, startPlayground } from "./playground.js";
import { setTraceUrl } from "./timeline.js";

const RETRY_S = 5;
let retry = null; // the one pending retry of `connect`
let live = false;

function say(message, isError = false) {
  const status = hook("status");
  status.textContent = message;
  status.classList.toggle("error", isError);
}

function askForKey(message) {
  hook("key-form").hidden = false;
  say(message, true);
  hook("key").focus();
}

function checkedSettings(settings) {
  const fine =
    settings &&
    Array.isArray(settings.plans) &&
    Array.isArray(settings.transfer_selectors) &&
    typeof settings.report_interval_s === "number" &&
    typeof settings.trace_url === "string";
  if (!fine) throw new ApiError("The server's console settings are not what this page expects: is this MAI Serve?", 0, null);
  return settings;
}

async function connect() {
  clearTimeout(retry);
  retry = null;
  try {
    const settings = checkedSettings((await call("console/settings.json")).data);
    const { data } = await call("v1/models");
    if (!data || !Array.isArray(data.data)) throw new ApiError("The server's /v1/models reply is not a model list.", 0, null);
    setOptions(settings);
    setTraceUrl(settings.trace_url);
    setTargets(data.data);
    hook("key-form").hidden = true;
    say(`Connected: ${data.data.length} policies and models.`);
    if (!live) {
      live = true;
      startLive(settings.report_interval_s);
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      askForKey(error.message);
      return;
    }
    say(`${error.message} Trying again in ${RETRY_S} s.`, true);
    retry = setTimeout(connect, RETRY_S * 1000);
  }
}

function start() {
  startPlayground();
  // A refused key later on (the server's keys changed) asks for a key again.
  onUnauthorized((message) => askForKey(message));
  hook("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey(hook("key").value.trim());
    hook("key").value = "";
    connect();
  });
  connect();
}

start();
