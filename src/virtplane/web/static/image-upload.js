// Uploading a file into an image library (admin): the file is hashed in the browser a chunk at
// a time (sha256.js), then streamed by XHR to PUT /v1/images/NAME/content?pool=&sha256=&kind=
// (&format=), whose upload events drive the progress bar; the server checks the SHA-256, the
// length and the format before any host is touched, and says why it refuses (e.g. 422
// ChecksumMismatch, 409 AlreadyExists).

import { el, field, input, select } from "./dom.js";
import { ApiStatusError, session } from "./api.js";
import { notify } from "./dialogs.js";
import { Sha256 } from "./sha256.js";

const CHUNK = 4 * 1024 * 1024;
const KINDS = ["Disk", "Iso", "Kernel", "Initrd"];

async function hashFile(file, onProgress) {
  const hasher = new Sha256();
  for (let at = 0; at < file.size; at += CHUNK) {
    hasher.update(new Uint8Array(await file.slice(at, at + CHUNK).arrayBuffer()));
    onProgress(Math.min(file.size, at + CHUNK) / file.size);
  }
  return hasher.hex();
}

function put(url, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.setRequestHeader("Authorization", `Bearer ${session.token}`);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.addEventListener("progress", (ev) => { if (ev.lengthComputable) onProgress(ev.loaded / ev.total); });
    xhr.addEventListener("load", () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = null; }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body);
      else reject(new ApiStatusError(xhr.status, (body && body.message) || xhr.statusText, (body && body.reason) || ""));
    });
    xhr.addEventListener("error", () => reject(new ApiStatusError(0, "the upload could not reach the API", "Unreachable")));
    xhr.send(file);
  });
}

// The form; ``pools()`` gives the image libraries' names, ``done()`` is called after an upload.
export function uploadForm(pools, done) {
  const file = el("input", { attrs: { type: "file", name: "file", id: "upload-file" } });
  const name = input("name", "", { spellcheck: "false", id: "upload-name", placeholder: "image name" });
  const pool = select("pool", [], "");
  pool.id = "upload-pool";
  const kind = select("kind", KINDS.map((k) => [k, k]), "Disk");
  const format = select("format", [["", "default"], ["qcow2", "qcow2"], ["raw", "raw"], ["iso", "iso"]], "");
  const bar = el("progress", { cls: "progress", attrs: { max: 1, value: 0, id: "upload-progress" } });
  const status = el("span", { cls: "hint", attrs: { id: "upload-status", role: "status" } });
  const error = el("p", { cls: "dialog-error", attrs: { role: "alert", id: "upload-error" } });
  error.hidden = true;
  const go = el("button", { cls: "button", text: "Upload", data: { act: "upload" } });
  go.type = "button";
  file.addEventListener("change", () => {
    const chosen = file.files[0];
    if (chosen && !name.value) name.value = chosen.name.toLowerCase().replace(/\.[^.]*$/, "").replace(/[^a-z0-9-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 63);
  });
  go.addEventListener("click", async () => {
    const chosen = file.files[0];
    error.hidden = true;
    if (!chosen) { error.textContent = "Choose a file first."; error.hidden = false; return; }
    go.disabled = true;
    try {
      status.textContent = "hashing…";
      const sha256 = await hashFile(chosen, (part) => { bar.value = part; status.textContent = `hashing ${Math.round(part * 100)}%`; });
      const query = new URLSearchParams({ pool: pool.value, sha256, kind: kind.value });
      if (format.value) query.set("format", format.value);
      bar.value = 0;
      status.textContent = "uploading…";
      const image = await put(`/v1/images/${encodeURIComponent(name.value.trim())}/content?${query}`, chosen, (part) => {
        bar.value = part;
        status.textContent = `uploading ${Math.round(part * 100)}%`;
      });
      status.textContent = `uploaded: ${image.metadata.name} (sha256 ${sha256.slice(0, 12)}…)`;
      notify("ok", `Image ${image.metadata.name} uploaded into ${pool.value}.`);
      done();
    } catch (err) {
      status.textContent = "";
      error.dataset.reason = err.reason || "";
      error.textContent = `${err.reason || "Error"}: ${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`;
      error.hidden = false;
    } finally {
      go.disabled = false;
    }
  });
  const form = el("div", { cls: "toolbar upload", attrs: { id: "upload-form" } }, [
    field("File", file), field("Name", name), field("Library", pool), field("Kind", kind), field("Format", format), go, bar, status]);
  return {
    root: el("div", {}, [form, error]),
    setPools(names) {
      if ([...pool.options].map((o) => o.value).join() === names.join()) return;
      pool.replaceChildren(...names.map((n) => el("option", { text: n, attrs: { value: n } })));
    },
  };
}
