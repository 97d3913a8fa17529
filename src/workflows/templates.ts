import Mustache from 'mustache';
import type { WorkflowContext } from './define-workflow.js';

/*
 * What oncely.yaml writes where TypeScript writes functions: templates (`{{input.order}}`,
 * `{{nodes.triage.text}}`, with Mustache's sections) for a node's input and the workflow's result,
 * and a condition on an earlier node's result text.
 */

/** Values are put in as they are: text as text, anything else as its JSON (never HTML-escaped). */
const AS_IS = {
  escape: (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value)),
};

/**
 * A template made into the function a node or a result takes: a string is rendered; an array or
 * object is rendered string by string, its shape kept; anything else is taken as it is.
 */
export function templateFunction(template: unknown): (context: WorkflowContext) => unknown {
  const render = (value: unknown, context: WorkflowContext): unknown => {
    if (typeof value === 'string') return Mustache.render(value, context, {}, AS_IS);
    if (Array.isArray(value)) return value.map((v) => render(v, context));
    if (typeof value === 'object' && value !== null)
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, render(v, context)]));
    return value;
  };
  return (context) => render(template, context);
}

/** The problems of a template's tags (an unclosed section, a bad tag), empty if it parses. */
export function templateProblems(template: unknown): string[] {
  if (typeof template === 'string') {
    try {
      Mustache.parse(template);
      return [];
    } catch (cause) {
      return [cause instanceof Error ? cause.message : String(cause)];
    }
  }
  if (Array.isArray(template)) return template.flatMap(templateProblems);
  if (typeof template === 'object' && template !== null)
    return Object.values(template).flatMap(templateProblems);
  return [];
}

export interface WhenTest {
  readonly node: string;
  readonly equals?: string | undefined;
  readonly contains?: string | undefined;
  readonly matches?: string | undefined;
  readonly not?: boolean | undefined;
}

/** A node's result as text: its `text` (an agent's answer), else its JSON. */
export function resultText(result: unknown): string {
  if (
    typeof result === 'object' &&
    result !== null &&
    typeof (result as { text?: unknown }).text === 'string'
  )
    return (result as { text: string }).text;
  return typeof result === 'string' ? result : JSON.stringify(result ?? null);
}

/** A condition made into the function a node takes; a bad regular expression throws here, at load. */
export function whenFunction(test: WhenTest): (context: WorkflowContext) => boolean {
  const pattern = test.matches === undefined ? undefined : new RegExp(test.matches);
  return (context) => {
    const text = resultText(context.nodes[test.node]);
    const holds =
      test.equals !== undefined
        ? text === test.equals
        : test.contains !== undefined
          ? text.includes(test.contains)
          : (pattern as RegExp).test(text);
    return test.not === true ? !holds : holds;
  };
}
