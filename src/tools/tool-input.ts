import { createRequire } from 'node:module';
import type { StandardJSONSchemaV1, StandardSchemaV1 } from '@standard-schema/spec';
import type { ErrorObject, ValidateFunction } from 'ajv';
import { z } from 'zod/v4';

/*
 * A tool's input schema, whatever made it: zod 4 (classic or mini), zod 3, any library that speaks
 * Standard Schema and says its JSON Schema (Standard JSON Schema), or a plain JSON Schema object.
 * Each becomes the two things oncely needs: the JSON Schema the model is shown, and a validation
 * of a call's arguments that names every problem.
 */

/** A JSON Schema for a tool's arguments, as MCP servers and OpenAPI documents give them. */
export interface JsonSchemaObject {
  readonly type: 'object';
  readonly [keyword: string]: unknown;
}

/** What `defineTool({ input })` takes. */
export type ToolInputSchema = StandardSchemaV1 | JsonSchemaObject;

/** The arguments a tool's `execute` receives for an input schema. */
export type InputOf<S> = S extends StandardSchemaV1
  ? StandardSchemaV1.InferOutput<S>
  : Record<string, unknown>;

export type InputCheck =
  { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly problems: string[] };

/** An input schema made usable: its JSON Schema and its validation. */
export interface ToolInput {
  /** `zod 4`, `zod 3`, `standard-schema:<vendor>` or `json-schema`. */
  readonly kind: string;
  readonly jsonSchema: Record<string, unknown>;
  check(args: unknown): InputCheck;
}

/** Loads a CommonJS dependency the first time a schema needs it, not with the package. */
const load = createRequire(import.meta.url);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

function standardOf(input: unknown): StandardSchemaV1.Props | undefined {
  if (!isObject(input) && typeof input !== 'function') return undefined;
  const props = (input as { '~standard'?: unknown })['~standard'];
  return isObject(props) && props.version === 1 && typeof props.validate === 'function'
    ? (props as unknown as StandardSchemaV1.Props)
    : undefined;
}

/**
 * The input schema of a tool, made usable; a problem is thrown as a sentence for the definition
 * error (what the schema is, and what to give instead).
 */
export function toolInputOf(input: unknown): ToolInput {
  const made = madeInput(input);
  // Plain JSON, nothing else: zod's JSON Schema carries a hidden `~standard` of its own, which other
  // libraries (the Agents SDK) would take for a schema to validate with.
  return { ...made, jsonSchema: JSON.parse(JSON.stringify(made.jsonSchema)) as Record<string, unknown> };
}

function madeInput(input: unknown): ToolInput {
  const standard = standardOf(input);
  if (isObject(input) && '_zod' in input) return zod4Input(input as unknown as z.core.$ZodType, standard);
  if (standard?.vendor === 'zod') return zod3Input(input, standard);
  if (standard !== undefined) return standardInput(standard);
  if (
    isObject(input) &&
    !('~standard' in input) &&
    (input.type === 'object' || isJsonSchemaWithoutType(input))
  ) {
    return jsonSchemaInput(input);
  }
  throw new Error(
    'must be a schema for the arguments: a zod schema (z.object({ ... }), zod 3 or 4, classic or mini), ' +
      'a Standard Schema with a JSON Schema (valibot, arktype, ...), or a JSON Schema object ({ type: "object", properties: { ... } })',
  );
}

function isJsonSchemaWithoutType(input: Record<string, unknown>): boolean {
  return 'properties' in input || '$schema' in input;
}

function zod4Input(schema: z.core.$ZodType, standard: StandardSchemaV1.Props | undefined): ToolInput {
  const jsonSchema = z.toJSONSchema(schema, { io: 'input' }) as Record<string, unknown>;
  // Classic schemas parse with their own method (same messages); mini ones through Standard Schema.
  const classic = schema instanceof z.ZodType ? schema : undefined;
  return {
    kind: 'zod 4',
    jsonSchema,
    check(args) {
      if (classic !== undefined) {
        const parsed = classic.safeParse(args);
        return parsed.success
          ? { ok: true, value: parsed.data }
          : { ok: false, problems: issuesText(parsed.error.issues) };
      }
      return checkStandard(standard!, args);
    },
  };
}

function zod3Input(schema: unknown, standard: StandardSchemaV1.Props): ToolInput {
  const { zodToJsonSchema } = load('zod-to-json-schema') as {
    zodToJsonSchema: (s: unknown, o: Record<string, unknown>) => Record<string, unknown>;
  };
  const jsonSchema = zodToJsonSchema(schema, {
    target: 'jsonSchema7',
    $refStrategy: 'none',
    effectStrategy: 'input',
  });
  return { kind: 'zod 3', jsonSchema, check: (args) => checkStandard(standard, args) };
}

function standardInput(standard: StandardSchemaV1.Props): ToolInput {
  const converter = (standard as Partial<StandardJSONSchemaV1.Props>).jsonSchema;
  if (converter === undefined || typeof converter.input !== 'function') {
    throw new Error(
      `is a Standard Schema (${standard.vendor}) that cannot say its JSON Schema, which the model must be shown; ` +
        'use a version of the library that implements Standard JSON Schema, or give the JSON Schema itself',
    );
  }
  const jsonSchema = converter.input({ target: 'draft-07' });
  return {
    kind: `standard-schema:${standard.vendor}`,
    jsonSchema,
    check: (args) => checkStandard(standard, args),
  };
}

function checkStandard(standard: StandardSchemaV1.Props, args: unknown): InputCheck {
  const result = standard.validate(args);
  if (result instanceof Promise) {
    throw new Error(
      `the ${standard.vendor} schema validates asynchronously; a tool's arguments are checked before anything is written, so use a synchronous schema`,
    );
  }
  if (result.issues === undefined) return { ok: true, value: result.value };
  return {
    ok: false,
    problems: result.issues.map((i) => {
      const path = (i.path ?? []).map((p) => String(typeof p === 'object' ? p.key : p)).join('.');
      return `${path || '(arguments)'}: ${i.message}`;
    }),
  };
}

interface AjvInstance {
  compile(schema: Record<string, unknown>): ValidateFunction;
}
let ajv: AjvInstance | undefined;

/** Ajv for JSON Schema arguments: draft-07 and 2020-12 keywords, unknown keywords ignored. */
function ajvInstance(): AjvInstance {
  if (ajv !== undefined) return ajv;
  const Ajv = (load('ajv') as { default: new (options: Record<string, unknown>) => AjvInstance }).default;
  const instance = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  ajv = instance;
  return instance;
}

function jsonSchemaInput(schema: Record<string, unknown>): ToolInput {
  let validate: ValidateFunction;
  try {
    // The dialect marker is left out: Ajv's default meta-schema is draft-07, and models ignore it.
    const rest = { ...schema };
    delete rest.$schema;
    validate = ajvInstance().compile(rest);
  } catch (cause) {
    throw new Error(`is not a valid JSON Schema: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
  return {
    kind: 'json-schema',
    jsonSchema: schema,
    check(args) {
      if (validate(args)) return { ok: true, value: args };
      return { ok: false, problems: (validate.errors ?? []).map(ajvProblem) };
    },
  };
}

function ajvProblem(e: ErrorObject): string {
  const path = e.instancePath.split('/').filter(Boolean).join('.');
  const missing =
    e.keyword === 'required' ? (e.params as { missingProperty?: string }).missingProperty : undefined;
  if (missing !== undefined) return `${path === '' ? missing : `${path}.${missing}`}: is required`;
  return `${path || '(arguments)'}: ${e.message ?? e.keyword}`;
}

function issuesText(issues: readonly { path: readonly PropertyKey[]; message: string }[]): string[] {
  return issues.map((i) => `${i.path.map(String).join('.') || '(arguments)'}: ${i.message}`);
}
