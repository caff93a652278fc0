/**
 * hearth in notebooks: objects render through a
 * `[Symbol.for("Jupyter.display")]()` method returning a MIME bundle (always
 * with text/plain), so a cell's last expression shows as a table, a figure
 * or a status view in the hearth kernel and as text anywhere else.
 *
 * @example
 * ```ts
 * import { display, lineChart, progress, statusView, table } from "hearth/notebook";
 *
 * table([{ step: 1, reward: 0.25 }, { step: 2, reward: 0.5 }]);   // last expression: HTML table + text
 * lineChart({ reward: [0.25, 0.5, 0.6] }, { title: "reward" });     // plotly JSON + offline HTML + text
 * const bar = progress(20, { label: "train" });                     // updates one output in place
 * for (let i = 0; i < 20; i++) { await step(); bar.tick(); }
 * display(statusView(await app.status()));                          // executors, states, GPUs, queues
 * ```
 */
export {
  DISPLAY_SINK,
  DisplayHandle,
  JUPYTER_DISPLAY,
  display,
  displaySink,
  inNotebook,
  isDisplayable,
  toMimeBundle,
  type DisplayOptions,
  type DisplaySink,
  type Displayable,
  type MimeBundle,
} from "./display.js";
export { InputTimeoutError, StdinNotAllowedError, input, password, type InputOptions } from "./input.js";
export { COMM_SINK, CommClosedError, NoCommsError, commSink, commsAvailable, openComm, registerCommTarget, type Comm, type CommData, type CommSink, type OpenCommOptions } from "./comm.js";
export { WIDGET_PROTOCOL_VERSION, WIDGET_TARGET, WIDGET_VIEW_MIME, WidgetModel, boxWidget, buttonWidget, htmlWidget, labelWidget, layoutModel } from "./widgets.js";
export { TrainingMonitor, trainingMonitor, type TrainingMonitorOptions, type TrainingPoint } from "./training-monitor.js";
export { clearOutput, page, type ClearOutputOptions } from "./output.js";
export { DataTable, table, type TableOptions } from "./table.js";
export { Figure, PLOTLY_MIME, barChart, figure, lineChart, type FigureOptions, type Layout, type Trace } from "./figure.js";
export { ProgressBar, ProgressView, progress, withProgress, type ProgressOptions } from "./progress.js";
export { StatusView, statusView } from "./status.js";
export { ServiceTypeError, checkServiceModule, formatDiagnostic, isTypeScriptModule, typeCheckServiceModule, type ServiceDiagnostic } from "../runtime/service-module.js";
export { cellText, escapeHtml, htmlTable, textTable } from "./text.js";
