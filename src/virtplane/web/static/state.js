// What the page knows: the objects the watches keep current, who is signed in, and waiters
// that a dialog uses to follow what it asked for (an operation ending, a snapshot Ready).

export const state = {
  run: 0, // bumped on sign-in/out so that a late answer of an old session is dropped
  abort: null, // ends every request and stream of the session
  role: null, // the caller's role (GET /v1/whoami); null until known: no actions shown
  user: null,
  objects: { hosts: new Map(), vms: new Map(), operations: new Map() },
  streams: new Set(), // what has been loaded and is being followed: hosts, vms, operations, events
  failing: new Set(), // what cannot reach the server right now
  eventCount: 0,
  olderEvents: null, // the continue token of the next older page of events
  maintenance: [],
  maintenanceHosts: new Set(),
  renderTimer: null,
  maintenanceTimer: null,
  vmPhaseFilter: null,
  lastData: null,
  drawn: new Set(), // the kinds drawn once (the first data of each is drawn at once)
};

const RANK = { viewer: 0, operator: 1, admin: 2 };

// Whether the signed-in caller has at least ``role`` (what the API will check again).
export function can(role) {
  return state.role !== null && (RANK[state.role] ?? -1) >= RANK[role];
}

const waiters = new Set();

// Called after every change the watches bring: each waiter looks again.
export function notifyWaiters() {
  for (const waiter of [...waiters]) waiter();
}

// Resolves with ``check()``'s value once it is truthy after a change (or at once); rejects
// when the session ends or ``timeoutMs`` passes.
export function waitFor(check, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const run = state.run;
    const timer = window.setTimeout(() => { waiters.delete(look); reject(new Error("timed out waiting")); }, timeoutMs);
    function look() {
      if (run !== state.run) {
        waiters.delete(look);
        window.clearTimeout(timer);
        reject(new Error("signed out"));
        return;
      }
      const value = check();
      if (value) {
        waiters.delete(look);
        window.clearTimeout(timer);
        resolve(value);
      }
    }
    waiters.add(look);
    look();
  });
}

// Called with each new event the event log's watch brings (a page's own log follows it).
export const eventListeners = new Set();
