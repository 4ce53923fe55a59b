// The console's start: what the server offers, the API key when it asks for one, then the playground
// and the live view.

import { ApiError, call, setApiKey } from "./api.js";
import { hook } from "./dom.js";
import { startLive } from "./live.js";
import { setOptions, setTargets, startPlayground } from "./playground.js";

function say(message, isError = false) {
  const status = hook("status");
  status.textContent = message;
  status.classList.toggle("error", isError);
}

let live = false;

async function connect(settings) {
  try {
    const { data } = await call("v1/models");
    setTargets(data.data);
    hook("key-form").hidden = true;
    say(`Connected: ${data.data.length} policies and models.`);
    if (!live) {
      live = true;
      startLive(settings.report_interval_s);
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      hook("key-form").hidden = false;
      say(error.message, true);
      hook("key").focus();
      return;
    }
    say(`${error.message} Trying again in 5 s.`, true);
    setTimeout(() => connect(settings), 5000);
  }
}

async function start() {
  startPlayground();
  let settings = { plans: [], transfer_selectors: [], report_interval_s: 5 };
  try {
    settings = (await call("console/settings.json")).data;
  } catch (error) {
    say(`${error.message}`, true);
  }
  setOptions(settings);
  hook("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey(hook("key").value.trim());
    hook("key").value = "";
    connect(settings);
  });
  await connect(settings);
}

start();
