// ESLint flat config: typed linting so that floating promises, import cycles and
// imports across the SDK's layers are errors.
import js from "@eslint/js";
import tseslint from "typescript-eslint";
import importX, { createNodeResolver } from "eslint-plugin-import-x";

// Sources import "./x.js" for "./x.ts" (NodeNext); import-x resolves that only with this
// alias. Without it every import is unresolved, and no-cycle and no-restricted-paths
// silently check nothing.
const resolver = createNodeResolver({ extensions: [".ts", ".js", ".mjs", ".json", ".node"], extensionAlias: { ".js": [".ts", ".js"] } });

// The SDK's layers (docs/architecture.md, "Layout"): the runtime knows the Provisioner
// interface, never an engine; only sdk/connect.ts (and the index) picks engines; the
// notebook helpers know no provisioner at all.
const ENGINE_CHOICE = ["./sdk/engines", "./sdk/connect.ts", "./sdk/index.ts"];
const layers = [
  { target: "./sdk/runtime", from: ENGINE_CHOICE, message: "sdk/runtime knows only the Provisioner interface (runtime/provisioner.ts); engines are chosen in sdk/connect.ts." },
  { target: "./sdk/notebook", from: [...ENGINE_CHOICE, "./sdk/runtime/provisioner.ts"], message: "sdk/notebook knows no provisioner or engine." },
  { target: ["./sdk/wire", "./sdk/cache", "./sdk/tensor"], from: [...ENGINE_CHOICE, "./sdk/runtime"], message: "sdk/wire, sdk/cache and sdk/tensor sit below the runtime and the engines." },
  { target: "./sdk/engines", from: ["./sdk/connect.ts", "./sdk/index.ts"], message: "engines implement Provisioner; they do not import the engine choice above them." },
  // The head is composed by role (docs/architecture.md): head.ts builds the driver, agent and executor
  // protocols and hands each a context (head-context.ts); nothing under head/ imports head.ts back.
  { target: "./cluster-agent/head", from: "./cluster-agent/head/head.ts", message: "head.ts composes the head; the role protocols, scheduler and the rest take a context interface (head-context.ts) instead of importing it." },
  // The scheduler picks a policy per service kind and hands it a PolicyContext; policies and the lifecycle sit below it.
  {
    target: ["./cluster-agent/head/service-policy.ts", "./cluster-agent/head/pool-policy.ts", "./cluster-agent/head/gang-policy.ts", "./cluster-agent/head/service-lifecycle.ts"],
    from: "./cluster-agent/head/scheduler.ts",
    message: "service policies and the service lifecycle get their context (PolicyContext, LifecycleHost) from the scheduler; they do not import scheduler.ts.",
  },
  // The RL layer is generic (docs/architecture.md, "The RL layer"): environments build on it, never the other way;
  // which environments a command offers is said above both (sdk/envs/registry.ts, cluster-agent/).
  { target: "./sdk/rl", from: "./sdk/envs", message: "sdk/rl is generic: it knows the Environment interface and environment packages, never an environment (sdk/envs/...)." },
  { target: "./sdk/envs/searchr1", from: "./sdk/envs/calculator", message: "environments do not import each other." },
  { target: "./sdk/envs/calculator", from: "./sdk/envs/searchr1", message: "environments do not import each other." },
  // The agent tasks are the calculator's and the chain task's questions and tools in a chat format: they build on both, one way.
  { target: ["./sdk/envs/calculator", "./sdk/envs/searchr1"], from: "./sdk/envs/agent", message: "sdk/envs/agent builds on the calculator and Search-R1; they never import it." },
  // The error tree and the shared text helpers are the bottom layer: every other layer (wire, cache, tensor,
  // runtime, the head and agents, the kernel) imports them, so they import nothing of hearth's.
  { target: ["./sdk/errors", "./sdk/format.ts"], from: "./sdk", except: ["./errors"], message: "sdk/errors and sdk/format.ts sit below every layer; they import nothing of hearth's." },
  { target: ["./sdk/errors", "./sdk/format.ts"], from: ["./cluster-agent", "./kernel"], message: "sdk/errors and sdk/format.ts sit below every layer; they import nothing of hearth's." },
];

export default tseslint.config(
  { ignores: ["dist/**", "node_modules/**", "cluster-agent/engine/**", "eslint.config.js", "scripts/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts"],
    languageOptions: {
      parserOptions: { project: "./tsconfig.json", tsconfigRootDir: import.meta.dirname },
    },
    plugins: { "import-x": importX },
    settings: { "import-x/resolver-next": [resolver] },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        { allowForKnownSafeCalls: [{ from: "package", name: ["test", "it", "describe", "suite"], package: "node:test" }] },
      ],
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: false }],
      "import-x/no-cycle": "error",
      "import-x/no-restricted-paths": ["error", { zones: layers }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-explicit-any": "off",
    },
  },
);
