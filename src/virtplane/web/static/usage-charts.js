// A STUB of the live usage graphs (CPU, memory, disk and network I/O): the usage collection's
// own module replaces this file with the same signature. mountUsage(el, kind, name) draws the
// graphs of a VM ("vm") or a host ("host") into ``el`` and returns a function that stops them.

export function mountUsage(el, kind, name) {
  const note = document.createElement("p");
  note.className = "usage-empty";
  note.dataset.kind = kind;
  note.dataset.name = name;
  note.textContent = "usage graphs: not collected yet";
  el.replaceChildren(note);
  return () => el.replaceChildren();
}
