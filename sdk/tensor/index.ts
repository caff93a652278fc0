/**
 * hearth tensor engine link: start the Python tensor engine (PyTorch, under
 * cluster-agent/engine) as a child process and drive generation, GRPO
 * training and exact bf16 weight publication over its pipes.
 *
 * @example
 * ```ts
 * import { TensorEngine, byteLevelVocab } from "./sdk/tensor/index.js";
 *
 * const engine = await TensorEngine.start();           // HEARTH_PYTHON or /usr/bin/python3
 * await engine.initModel({ config: "tiny", seed: 0 });  // or { checkpoint: "/models/qwen2.5-3b" }
 * await engine.setVocab(byteLevelVocab(tokenizerJson)); // once, for stop strings
 * const { session, rows } = await engine.generate([[1, 2, 3]], { maxNewTokens: 64, stop: ["</search>"] });
 * if (rows[0].finishReason === "stop") {
 *   const more = await engine.resume(session, new Map([[0, searchResultIds]]), { maxNewTokens: 64 });
 * }
 * await engine.close();
 * ```
 */

export { TensorEngine, DEFAULT_REQUEST_TIMEOUT_MS, DEFAULT_HANG_TIMEOUT_MS } from "./engine.js";
export { engineLiveness, onEngineChange } from "./liveness.js";
export type { EngineLiveness, EngineState } from "./liveness.js";
export type { TensorEngineOptions, RequestOptions } from "./engine.js";
export { EngineError } from "./errors.js";
export type { EngineErrorInfo } from "./errors.js";
export { findPython, findEngineDir, PYTHON_CANDIDATES } from "./python.js";
export { FrameDecoder, encodeFrame, encodeValue, decodeValue, MAX_HEADER_BYTES } from "./frame.js";
export type { Frame } from "./frame.js";
export { int32Tensor, float32Tensor, uint8Tensor, toInt32Array, toFloat32Array, isTensor, itemSize } from "./tensor.js";
export type { DType, Tensor } from "./tensor.js";
export { byteLevelVocab } from "./vocab.js";
export { deriveSeed } from "./seeds.js";
export { initModelFolder, specialTokenIds } from "./model-folder.js";
export type { ModelFolderOptions, ModelFolderResult, SpecialTokenIds } from "./model-folder.js";
export { checkModelFolder, checkConfig, expectedTensorShapes, readSafetensorsShapes, CONFIG_LIMITS } from "./model-check.js";
export type { ModelFolderInfo } from "./model-check.js";
export type { TokenizerJson } from "./vocab.js";
export type {
  ApplyResult, BatchedRow, BatchResult, BatchRowSpec, DistributedOptions, EngineInfo, FinishReason, GenerateResult, GeneratedRow, InitFolderOptions, TokenAlternatives,
  InitFolderResult, InitModelOptions, InitModelResult, FilePublication, PatchStats, Publication, PublicationFile, PublicationSource, PublishedFile, SamplingOptions, TrainBatch, TrainMetrics, TrainerOptions,
} from "./types.js";
