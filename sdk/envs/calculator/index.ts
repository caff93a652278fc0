/**
 * The calculator on hearth (`hearth/calculator`): word problems whose
 * answers need one to three chained operations, a `<calc>expression</calc>`
 * tool evaluated by a safe parser of our own, exact match on the number.
 * `AgentRun.create(options, calculator)` trains it; `npm run demo -- --env
 * calculator` runs it on the embedded default. The generic layer is
 * `hearth/rl`.
 */
export { calculator } from "./package.js";
export { CalculatorEnvironment, CALC_TEXT, CALC_TAGS, CALC_STOPS, calcPrompt, parseCalc, resultBlock, calculate } from "./environment.js";
export { evaluate, ExpressionError, MAX_LENGTH, MAX_DEPTH, MAX_DIGITS, MAX_MAGNITUDE } from "./expression.js";
export { calcRecipe, calcDemonstrations, calcPlan, prepareCalc, callsCategory, CALC_EXPLORE, CALC_RECIPE, CALC_POLICY, type CalcPreparedTask } from "./recipe.js";
export { calcTask, CALLS_OF, KIND_WEIGHTS, MAX_NUMBER, type CalcQuestion, type CalcKind, type CalcTask, type CalcOptions } from "./task.js";
export { calcReward, answerOf, CALCULATOR_ENVIRONMENT } from "./reward.js";
