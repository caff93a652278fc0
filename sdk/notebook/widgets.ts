/**
 * A few Jupyter widgets (HTML, Button, Label, HBox, VBox) spoken in the
 * ipywidgets 8 comm protocol, so JupyterLab's widget manager (and VS Code's)
 * renders them without any extension of ours: each model is a comm with
 * target "jupyter.widget" whose comm_open carries the model's state; a
 * display_data of `application/vnd.jupyter.widget-view+json` shows it;
 * `update` messages change state both ways, `custom` messages carry events
 * (a button's click), `request_state` and the "jupyter.widget.control"
 * target's `request_states` let a reloaded page fetch the current state.
 *
 * Protocol: https://github.com/jupyter-widgets/ipywidgets/blob/main/packages/schema/messages.md
 */
import { commSink, openComm, type Comm, type CommData } from "./comm.js";

/** The comm target of widget models. */
export const WIDGET_TARGET = "jupyter.widget";
/** The MIME type of a widget view in display_data. */
export const WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json";
/** ipywidgets 8: message protocol 2.1.0, @jupyter-widgets/base and /controls 2.0.0. */
export const WIDGET_PROTOCOL_VERSION = "2.1.0";
const BASE = "@jupyter-widgets/base";
const CONTROLS = "@jupyter-widgets/controls";
const MODULE_VERSION = "2.0.0";

/** Live models of this process, for request_states from a reloaded front end. */
const LIVE = new Map<string, WidgetModel>();
const CONTROL_REGISTERED = Symbol.for("hearth.notebook.widget-control");

/** One widget model, backed by one comm. */
export class WidgetModel {
  private readonly state: Record<string, unknown>;
  private readonly customHandlers = new Set<(content: CommData) => void>();

  private constructor(
    readonly comm: Comm,
    state: Record<string, unknown>,
  ) {
    this.state = state;
    comm.onMessage((data) => this.receive(data));
    comm.onClose(() => LIVE.delete(comm.commId));
  }

  /** Opens a model (comm_open with its full state). Needs the hearth kernel. */
  static open(state: Record<string, unknown>): WidgetModel {
    registerControlTarget();
    const comm = openComm(WIDGET_TARGET, { data: { state, buffer_paths: [] }, metadata: { version: WIDGET_PROTOCOL_VERSION } });
    const model = new WidgetModel(comm, { ...state });
    LIVE.set(comm.commId, model);
    return model;
  }

  /** The model id (its comm id). */
  get id(): string {
    return this.comm.commId;
  }

  /** How other models' state refers to this one. */
  get ref(): string {
    return `IPY_MODEL_${this.id}`;
  }

  /** A copy of the current state. */
  get current(): Record<string, unknown> {
    return { ...this.state };
  }

  /** Changes state here and in every view. */
  set(patch: Record<string, unknown>): void {
    Object.assign(this.state, patch);
    if (!this.comm.closed) this.comm.send({ method: "update", state: patch, buffer_paths: [] });
  }

  /** Calls `handler` with each custom message's content (a Button's `{ event: "click" }`). */
  onCustom(handler: (content: CommData) => void): () => void {
    this.customHandlers.add(handler);
    return () => this.customHandlers.delete(handler);
  }

  /** The display_data bundle entry that shows this model. */
  viewData(): { model_id: string; version_major: number; version_minor: number } {
    return { model_id: this.id, version_major: 2, version_minor: 0 };
  }

  /** Closes the comm (the views go away). */
  close(): void {
    LIVE.delete(this.id);
    this.comm.close();
  }

  private receive(data: CommData): void {
    const method = data.method;
    if (method === "update" && data.state && typeof data.state === "object") {
      // A view changed a value (a text field): keep it, echo nothing (ipywidgets 8 echo is optional).
      Object.assign(this.state, data.state as Record<string, unknown>);
    } else if (method === "request_state") {
      this.comm.send({ method: "update", state: this.current, buffer_paths: [] });
    } else if (method === "custom") {
      const content = (data.content ?? {}) as CommData;
      for (const h of [...this.customHandlers]) h(content);
    }
  }
}

/** "jupyter.widget.control": a reloaded front end asks for every live model's state at once. */
function registerControlTarget(): void {
  const g = globalThis as Record<symbol, boolean | undefined>;
  const sink = commSink();
  if (g[CONTROL_REGISTERED] || !sink) return;
  g[CONTROL_REGISTERED] = true;
  sink.registerTarget("jupyter.widget.control", (comm) => {
    comm.onMessage((data) => {
      if (data.method !== "request_states") return;
      const states: Record<string, unknown> = {};
      for (const [id, m] of LIVE) states[id] = { model_name: m.current._model_name, model_module: m.current._model_module, model_module_version: m.current._model_module_version, state: m.current };
      comm.send({ method: "update_states", states, buffer_paths: {} });
    });
  });
}

function model(name: string, module: string, view: string, viewModule: string, state: Record<string, unknown>): Record<string, unknown> {
  return {
    _model_name: name,
    _model_module: module,
    _model_module_version: MODULE_VERSION,
    _view_name: view,
    _view_module: viewModule,
    _view_module_version: MODULE_VERSION,
    _view_count: null,
    ...state,
  };
}

/** A layout model (every DOM widget refers to one). */
export function layoutModel(layout: Record<string, unknown> = {}): WidgetModel {
  return WidgetModel.open(model("LayoutModel", BASE, "LayoutView", BASE, layout));
}

function styled(name: string, view: string, styleName: string, state: Record<string, unknown>, layout: Record<string, unknown> = {}): WidgetModel {
  const style = WidgetModel.open(model(styleName, CONTROLS, "StyleView", BASE, {}));
  return WidgetModel.open(model(name, CONTROLS, view, CONTROLS, { _dom_classes: [], layout: layoutModel(layout).ref, style: style.ref, tabbable: null, tooltip: null, ...state }));
}

/** An HTML widget (its `value` is the HTML shown). */
export function htmlWidget(value: string, layout?: Record<string, unknown>): WidgetModel {
  return styled("HTMLModel", "HTMLView", "HTMLStyleModel", { value, description: "", description_allow_html: false, placeholder: "\u200b" }, layout);
}

/** A text label. */
export function labelWidget(value: string): WidgetModel {
  return styled("LabelModel", "LabelView", "LabelStyleModel", { value, description: "", description_allow_html: false, placeholder: "\u200b" });
}

/** A button; `onCustom` receives `{ event: "click" }`. */
export function buttonWidget(description: string, opts: { buttonStyle?: "" | "primary" | "success" | "info" | "warning" | "danger"; icon?: string; tooltip?: string } = {}): WidgetModel {
  return styled("ButtonModel", "ButtonView", "ButtonStyleModel", { description, button_style: opts.buttonStyle ?? "", disabled: false, icon: opts.icon ?? "", tooltip: opts.tooltip ?? null });
}

/** A horizontal or vertical box of child widgets. */
export function boxWidget(direction: "row" | "column", children: WidgetModel[]): WidgetModel {
  const [name, view] = direction === "row" ? ["HBoxModel", "HBoxView"] : ["VBoxModel", "VBoxView"];
  return WidgetModel.open(model(name, CONTROLS, view, CONTROLS, { _dom_classes: [], box_style: "", children: children.map((c) => c.ref), layout: layoutModel().ref, tabbable: null, tooltip: null }));
}
