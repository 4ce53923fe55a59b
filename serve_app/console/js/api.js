// The server's API, as the page calls it: JSON in and out, the API key (kept in this module's memory
// only) as a bearer token, and every failure as an ApiError carrying the message the API sent.

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status; // 0: no answer from the server at all
    this.code = code;
  }
}

let apiKey = null;
let unauthorized = () => {};

/** `listener(message)` is told of every 401 the API answers. */
export function onUnauthorized(listener) {
  unauthorized = listener;
}

export function setApiKey(key) {
  apiKey = key ? key : null;
}

/** What a reply without the API's JSON error body means (Serve's proxy, a server still starting). */
function describe(status, text) {
  const said = text.trim().slice(0, 200);
  const detail = said ? `: ${said}` : "";
  if (status === 404) return `HTTP 404 from the server${detail} (is this MAI Serve, and is its application deployed?)`;
  if (status === 502 || status === 503 || status === 504) {
    return `HTTP ${status} from the server${detail}: it is starting, its models are loading, or it is overloaded`;
  }
  return `HTTP ${status} from the server${detail}`;
}

/**
 * Call `path` (relative to the server's root). Returns {data, headers, status}; throws ApiError with
 * the API's own message on a 4xx/5xx, and says so when the server cannot be reached.
 */
export async function call(path, { method = "GET", body } = {}) {
  const headers = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(
      `The server is not reachable: it is down or restarting (${error.message}).`,
      0,
      "unreachable",
    );
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = data && typeof data === "object" ? data.error : null;
    if (response.status === 401) unauthorized(error?.message ?? "the API key was refused");
    if (error && typeof error.message === "string") {
      const code = error.code ? ` (${error.code})` : "";
      throw new ApiError(`${response.status}${code}: ${error.message}`, response.status, error.code ?? null);
    }
    throw new ApiError(describe(response.status, text), response.status, null);
  }
  if (data === null || typeof data !== "object") {
    throw new ApiError(`The server answered ${path} with something that is not JSON: is this MAI Serve?`, response.status, null);
  }
  return { data, headers: response.headers, status: response.status };
}
