/*
 * OpenAI's strict mode for tool schemas (structured outputs): every object lists all its properties
 * as required and allows no others; a property that may be left out is instead one that may be null.
 * A model in strict mode then sends null for an optional argument it does not use, which the tool's
 * own schema would refuse: `fromStrictArgs` takes those nulls out again before the arguments are
 * validated, digested and recorded, so a tool sees the same arguments either way.
 */

type Schema = Record<string, unknown>;

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

const COMBINATORS = ['anyOf', 'oneOf', 'allOf'] as const;

/** The strict-mode form of a tool's JSON Schema; a schema strict mode cannot express throws, naming where. */
export function strictJsonSchema(schema: Schema): Schema {
  return strictNode(schema, '(arguments)');
}

function strictNode(node: Schema, at: string): Schema {
  const out: Schema = { ...node };
  if (isObject(node.properties) || node.type === 'object') {
    const properties = isObject(node.properties) ? node.properties : {};
    const required = new Set(Array.isArray(node.required) ? (node.required as string[]) : []);
    if (
      isObject(node.additionalProperties) ||
      (node.additionalProperties === true && Object.keys(properties).length === 0)
    ) {
      throw new Error(
        `${at}: strict mode cannot describe an object of arbitrary keys (a record or map); give its properties`,
      );
    }
    const strictProperties: Schema = {};
    for (const [key, value] of Object.entries(properties)) {
      if (!isObject(value)) throw new Error(`${at}.${key}: not a schema`);
      const strict = strictNode(value, `${at}.${key}`);
      strictProperties[key] = required.has(key) ? strict : nullable(strict);
    }
    out.properties = strictProperties;
    out.required = Object.keys(strictProperties);
    out.additionalProperties = false;
  }
  if (isObject(node.items)) out.items = strictNode(node.items, `${at}[]`);
  for (const combinator of COMBINATORS) {
    const options = node[combinator];
    if (Array.isArray(options)) {
      out[combinator] = (options as unknown[]).map((o, i) =>
        isObject(o) ? strictNode(o, `${at}.${combinator}[${i}]`) : o,
      );
    }
  }
  for (const defs of ['$defs', 'definitions'] as const) {
    const table = node[defs];
    if (isObject(table)) {
      out[defs] = Object.fromEntries(
        Object.entries(table).map(([k, v]) => [k, isObject(v) ? strictNode(v, `${defs}.${k}`) : v]),
      );
    }
  }
  return out;
}

/** A schema that also allows null (if it does not already). */
function nullable(schema: Schema): Schema {
  if (allowsNull(schema)) return schema;
  if (typeof schema.type === 'string') {
    const { enum: values, ...rest } = schema;
    return {
      ...rest,
      type: [schema.type, 'null'],
      ...(Array.isArray(values) ? { enum: [...(values as unknown[]), null] } : {}),
    };
  }
  if (Array.isArray(schema.type)) return { ...schema, type: [...(schema.type as unknown[]), 'null'] };
  return { anyOf: [schema, { type: 'null' }] };
}

function allowsNull(schema: Schema): boolean {
  if (schema.type === 'null') return true;
  if (Array.isArray(schema.type) && schema.type.includes('null')) return true;
  return COMBINATORS.some(
    (c) => Array.isArray(schema[c]) && (schema[c] as unknown[]).some((o) => isObject(o) && allowsNull(o)),
  );
}

/**
 * Arguments a strict-mode model sent, as the tool's own schema expects them: a null for a property
 * the schema lets be left out (and does not itself allow to be null) is taken out.
 */
export function fromStrictArgs(args: unknown, schema: Schema): unknown {
  if (Array.isArray(args)) {
    return isObject(schema.items) ? args.map((a) => fromStrictArgs(a, schema.items as Schema)) : args;
  }
  if (!isObject(args) || !isObject(schema.properties)) return args;
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  const out: Schema = {};
  for (const [key, value] of Object.entries(args)) {
    const property = schema.properties[key];
    if (!isObject(property)) {
      out[key] = value;
      continue;
    }
    if (value === null && !required.has(key) && !allowsNull(property)) continue;
    out[key] = fromStrictArgs(value, property);
  }
  return out;
}
