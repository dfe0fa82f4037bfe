// Keyboard shortcuts for what an operator does most (? lists them), and the light or dark
// theme: the system's (prefers-color-scheme) until the toggle chooses one, kept for the browser.

import { $, el } from "./dom.js";
import { openDialog } from "./dialogs.js";
import { go } from "./router.js";

const THEME_KEY = "virtplane.theme";
const GO = { v: "vms", h: "hosts", s: "storage", i: "images", n: "networks", p: "snapshots", b: "backups", l: "placement", o: "operations", e: "events" };
const HELP = [
  ["/", "search the list shown"],
  ...Object.entries(GO).map(([key, list]) => [`g ${key}`, `go to ${list}`]),
  ["t", "light or dark theme"],
  ["Esc", "close a menu or dialog"],
  ["?", "this help"],
];

function theme() {
  const chosen = localStorage.getItem(THEME_KEY);
  const dark = chosen ? chosen === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  $("theme").textContent = dark ? "Light" : "Dark";
}

function toggleTheme() {
  localStorage.setItem(THEME_KEY, document.documentElement.dataset.theme === "dark" ? "light" : "dark");
  theme();
}

function help() {
  if (document.querySelector('dialog[data-dialog="help"]')) return;
  const rows = HELP.map(([key, what]) => el("tr", {}, [el("td", {}, [el("kbd", { text: key })]), el("td", { text: what })]));
  const dialog = openDialog({ name: "help", title: "Keyboard shortcuts", body: [el("table", { cls: "grid compact" }, [el("tbody", {}, rows)])] });
  dialog.setActions([]);
}

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

export function setupShortcuts() {
  theme();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", theme);
  $("theme").addEventListener("click", toggleTheme);
  $("help").addEventListener("click", help);
  let pending = null; // "g", waiting for its second key
  document.addEventListener("keydown", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target) || document.querySelector("dialog[open]") || $("dashboard").hidden) return;
    if (pending === "g") {
      pending = null;
      if (GO[ev.key]) { ev.preventDefault(); go(GO[ev.key]); }
      return;
    }
    if (ev.key === "g") pending = "g";
    else if (ev.key === "?") { ev.preventDefault(); help(); }
    else if (ev.key === "t") toggleTheme();
    else if (ev.key === "/") {
      const search = [...document.querySelectorAll("section.view:not([hidden]) input[type=search]")][0];
      if (search) { ev.preventDefault(); search.focus(); }
    }
  });
}
