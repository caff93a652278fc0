/**
 * A page of the browser test that renders the hearth kernel's ipywidgets 8
 * models with ipywidgets 8's own renderer, `@jupyter-widgets/html-manager`
 * (npm; its `dist/embed-amd.js` defines the manager, base and controls as
 * AMD modules). Notebook 6 ships ipywidgets 6's manager, which cannot render
 * ipywidgets 8 models, and no JupyterLab is packaged here; so the page is
 * served by the Notebook server itself (as an nbextension's static files)
 * and talks to a live kernel over the server's own kernel websocket. Its client is small: comm_open of target
 * "jupyter.widget" goes to the manager's `handle_comm_open` with a comm that
 * sends comm_msg/comm_close back over the socket; comm_msg reaches that
 * comm's handler; a display_data of the widget-view MIME type is drawn with
 * `create_view` + `display_view`. `window.hearthWidgets.execute(code)`
 * runs a cell and resolves with its reply and text outputs.
 */
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { REPO_ROOT } from "./bridge.js";

/** The page's folder among the server's nbextensions, and its path on the server. */
const WIDGET_FOLDER = "hearth-widgets";
export const WIDGET_PAGE_PREFIX = `/nbextensions/${WIDGET_FOLDER}/`;

const HTML_MANAGER_DIST = path.join(REPO_ROOT, "node_modules", "@jupyter-widgets", "html-manager", "dist");

const PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>hearth widgets</title>
<script>window.__jupyter_widgets_assets_path__ = "${WIDGET_PAGE_PREFIX}";</script>
<script src="/static/components/requirejs/require.js"></script>
<script src="${WIDGET_PAGE_PREFIX}embed-amd.js"></script>
</head><body><div id="views"></div><script src="${WIDGET_PAGE_PREFIX}client.js"></script></body></html>`;

/** The page's client (plain browser JavaScript, run as is). */
const CLIENT = `(function () {
  const params = new URLSearchParams(location.search);
  const session = crypto.randomUUID();
  const ws = new WebSocket("ws://" + location.host + "/api/kernels/" + params.get("kernel") + "/channels?session_id=" + session + "&token=" + params.get("token"));
  const comms = new Map();
  const pending = new Map();
  const errors = [];
  let manager;
  let queue = Promise.resolve();
  function send(channel, msgType, content) {
    const msgId = crypto.randomUUID();
    ws.send(JSON.stringify({ channel, header: { msg_id: msgId, msg_type: msgType, username: "browser-test", session, date: new Date().toISOString(), version: "5.3" }, parent_header: {}, metadata: {}, content, buffers: [] }));
    return msgId;
  }
  function comm(commId, targetName) {
    const c = {
      comm_id: commId,
      target_name: targetName,
      handlers: { msg: null, close: null },
      open() { throw new Error("the kernel opens these comms"); },
      send(data) { return send("shell", "comm_msg", { comm_id: commId, data }); },
      close(data) { comms.delete(commId); return send("shell", "comm_close", { comm_id: commId, data: data || {} }); },
      on_msg(cb) { c.handlers.msg = cb; },
      on_close(cb) { c.handlers.close = cb; },
    };
    comms.set(commId, c);
    return c;
  }
  async function handle(msg) {
    const type = msg.header.msg_type;
    const call = pending.get(msg.parent_header && msg.parent_header.msg_id);
    if (type === "comm_open" && msg.content.target_name === "jupyter.widget") await manager.handle_comm_open(comm(msg.content.comm_id, msg.content.target_name), msg);
    else if (type === "comm_msg") { const c = comms.get(msg.content.comm_id); if (c && c.handlers.msg) c.handlers.msg(msg); }
    else if (type === "comm_close") { const c = comms.get(msg.content.comm_id); comms.delete(msg.content.comm_id); if (c && c.handlers.close) c.handlers.close(msg); }
    else if (type === "display_data" || type === "execute_result") {
      const view = msg.content.data["application/vnd.jupyter.widget-view+json"];
      if (view) {
        const el = document.createElement("div");
        el.className = "hearth-widget-output";
        document.getElementById("views").append(el);
        const model = await manager.get_model(view.model_id);
        await manager.display_view(manager.create_view(model), el);
      }
      if (call) call.outputs.push(msg.content.data["text/plain"]);
    } else if (type === "error" && call) call.outputs.push(msg.content.ename + ": " + msg.content.evalue);
    else if (type === "execute_reply" && call) { call.reply = msg.content; settle(msg.parent_header.msg_id); }
    else if (type === "status" && call && msg.content.execution_state === "idle") { call.idle = true; settle(msg.parent_header.msg_id); }
  }
  function settle(id) {
    const call = pending.get(id);
    if (call && call.reply && call.idle) { pending.delete(id); call.resolve({ reply: call.reply, outputs: call.outputs }); }
  }
  ws.onmessage = (ev) => {
    if (typeof ev.data !== "string") return; // binary frames carry buffers: these widgets send none
    const msg = JSON.parse(ev.data);
    queue = queue.then(() => handle(msg)).catch((err) => errors.push(String(err && err.stack || err)));
  };
  const opened = new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error("websocket error")); });
  const loaded = new Promise((resolve, reject) => window.require(["@jupyter-widgets/html-manager"], (hm) => { manager = new hm.HTMLManager(); resolve(); }, reject));
  window.hearthWidgets = {
    errors,
    ready: Promise.all([opened, loaded]).then(() => true),
    execute(code) {
      return new Promise((resolve) => {
        const id = send("shell", "execute_request", { code, silent: false, store_history: true, user_expressions: {}, allow_stdin: false, stop_on_error: true });
        pending.set(id, { resolve, outputs: [], reply: null, idle: false });
      });
    },
  };
})();`;

/**
 * Writes the page, its client and html-manager's built files as an
 * nbextension folder under `jupyterPath` (`<jupyterPath>/nbextensions/`,
 * which Notebook 6 serves as static files on its own origin, as it serves
 * front-end extensions). Not under the notebook folder: Notebook serves
 * /files/ with a CSP sandbox, so such a page has an opaque origin, sends no
 * cookie and may not open the kernel's socket; and not a page the test
 * fulfils itself: Chromium counts that as a public page and its local-network
 * checks block its socket to 127.0.0.1.
 */
export function installWidgetPage(jupyterPath: string): void {
  const out = path.join(jupyterPath, "nbextensions", WIDGET_FOLDER);
  mkdirSync(out, { recursive: true });
  writeFileSync(path.join(out, "page.html"), PAGE);
  writeFileSync(path.join(out, "client.js"), CLIENT);
  for (const f of readdirSync(HTML_MANAGER_DIST)) if (!f.endsWith(".map")) copyFileSync(path.join(HTML_MANAGER_DIST, f), path.join(out, f));
}

/** The page's URL for kernel `kernelId` of a server at `base` with `token` (the client opens the kernel's socket with it). */
export function widgetPageUrl(base: string, kernelId: string, token: string): string {
  return `${base}${WIDGET_PAGE_PREFIX}page.html?kernel=${kernelId}&token=${token}`;
}
