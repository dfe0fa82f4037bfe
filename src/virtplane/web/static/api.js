// Talking to the JSON API with the session's bearer token: reads, writes, lists a page at a
// time, and watch streams (JSON lines). An error answer keeps the API's {reason, message}.

import { text } from "./dom.js";

const PAGE = 500;

export const session = { token: null };

export class AuthError extends Error {}
export class UnreachableError extends Error {}
export class ExpiredError extends Error {}
export class ApiStatusError extends Error {
  constructor(status, message, reason) {
    super(message);
    this.status = status;
    this.reason = reason || "";
  }
}

function headers(accept, json = false) {
  const sent = { Authorization: `Bearer ${session.token}`, Accept: accept };
  if (json) sent["Content-Type"] = "application/json";
  return sent;
}

async function request(path, init, signal) {
  try {
    return await fetch(path, { cache: "no-store", signal, ...init });
  } catch (err) {
    if (signal && signal.aborted) throw err;
    throw new UnreachableError(String(err && err.message ? err.message : err));
  }
}

async function check(response) {
  if (response.ok) return;
  let body = null;
  try {
    body = await response.json();
  } catch (err) {
    body = null;
  }
  const message = text(body && body.message, response.statusText || "error");
  const reason = body && typeof body.reason === "string" ? body.reason : "";
  if (response.status === 401) throw new AuthError(message);
  if (response.status === 410) throw new ExpiredError(message);
  throw new ApiStatusError(response.status, message, reason);
}

async function json(response) {
  try {
    return await response.json();
  } catch (err) {
    throw new ApiStatusError(response.status, "the server sent a response that is not JSON", "");
  }
}

export async function api(path, signal) {
  const response = await request(path, { headers: headers("application/json") }, signal);
  await check(response);
  return json(response);
}

// A write (POST, PUT, PATCH, DELETE); the answer's JSON, or an error with the API's reason.
export async function send(method, path, body) {
  const init = { method, headers: headers("application/json", body !== undefined) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await request(path, init, null);
  await check(response);
  return response.status === 204 ? null : json(response);
}

// Every object of a kind, a page at a time; and the revision to watch from. ``onPage(items)``
// sees what has come so far after each page (a large fleet's first screen need not wait).
export async function listAll(plural, signal, query = "", onPage = null) {
  const items = new Map();
  let revision = null;
  let token = null;
  do {
    const more = token ? `&continue=${encodeURIComponent(token)}` : "";
    const page = await api(`/v1/${plural}?limit=${PAGE}${query}${more}`, signal);
    for (const item of page.items || []) items.set(item.metadata.name, item);
    const meta = page.metadata || {};
    if (revision === null) revision = meta.resource_version || 0;
    token = meta.continue || null;
    if (onPage && token) onPage(items);
  } while (token);
  return { items, revision };
}

// Reads one watch stream, a JSON line at a time, until the server ends it; throws on a failure.
export async function readStream(path, onEvent, signal) {
  const response = await request(path, { headers: headers("application/x-ndjson") }, signal);
  await check(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (err) {
      if (signal.aborted) throw err;
      throw new UnreachableError(String(err && err.message ? err.message : err));
    }
    if (chunk.done) return;
    buffer += decoder.decode(chunk.value, { stream: true });
    let end = buffer.indexOf("\n");
    while (end >= 0) {
      const line = buffer.slice(0, end).trim();
      buffer = buffer.slice(end + 1);
      if (line) onEvent(JSON.parse(line));
      end = buffer.indexOf("\n");
    }
  }
}

export function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = window.setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { window.clearTimeout(timer); resolve(); }, { once: true });
  });
}

export const path = (...parts) => parts.map((p) => encodeURIComponent(p)).join("/");
