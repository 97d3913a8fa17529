import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { OncelyError } from '../errors/index.js';

/** Expansions of aliases a configuration may make; the YAML library's own default. */
const MAX_ALIASES = 100;

/** A problem at a path of the document; `atKey` points at the key itself (an unknown key). */
export interface ConfigProblem {
  readonly path: readonly PropertyKey[];
  readonly message: string;
  readonly atKey?: boolean;
}

interface Position {
  readonly line: number;
  readonly col: number;
}

/**
 * A parsed `oncely.yaml` that can say where a path is, so every error names the file, the path,
 * the line and column, and what was expected.
 */
export class ConfigSource {
  private constructor(
    /** The file as the user named it: messages are shown with this. */
    readonly shownPath: string,
    readonly doc: Document,
    private readonly lines: LineCounter,
  ) {}

  /** Parses YAML text; a syntax error throws `CONFIG_INVALID` with its line and column. */
  static parse(shownPath: string, text: string): ConfigSource {
    const lines = new LineCounter();
    const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
    if (doc.errors.length > 0) {
      const messages = doc.errors.map((e) => {
        const at = e.linePos?.[0] ?? lines.linePos(e.pos[0]);
        return `${shownPath}:${at.line}:${at.col}: YAML syntax error: ${e.message.split('\n')[0] ?? e.code}`;
      });
      throw new OncelyError('CONFIG_INVALID', messages.join('\n'), {
        details: { file: shownPath, problems: messages },
      });
    }
    return new ConfigSource(shownPath, doc, lines);
  }

  /**
   * The document as plain values. Aliases are expanded at most `MAX_ALIASES` times: a file whose
   * aliases would expand without bound (a "billion laughs") is refused with `CONFIG_INVALID`.
   */
  value(): unknown {
    try {
      return this.doc.toJS({ maxAliasCount: MAX_ALIASES }) as unknown;
    } catch (cause) {
      throw new OncelyError(
        'CONFIG_INVALID',
        `${this.shownPath}: its YAML aliases expand too far (more than ${MAX_ALIASES} uses); ` +
          'write the values out instead of nesting aliases',
        { cause, details: { file: this.shownPath } },
      );
    }
  }

  /** `file:line:col: path: message`, at the deepest node of the path that exists. */
  describe(problem: ConfigProblem): string {
    const at = this.locate(problem.path, problem.atKey === true);
    const path = pathText(problem.path);
    return `${this.shownPath}:${at.line}:${at.col}: ${path === '' ? '' : `${path}: `}${problem.message}`;
  }

  /** One `CONFIG_INVALID` listing every problem, one a line. */
  error(
    problems: readonly ConfigProblem[],
    code: 'CONFIG_INVALID' | 'MODEL_CONFIG_INVALID' = 'CONFIG_INVALID',
  ) {
    const lines = problems.map((p) => this.describe(p));
    const head = lines.length === 1 ? '' : `${this.shownPath} has ${lines.length} problems:\n`;
    return new OncelyError(code, head + lines.join('\n'), {
      details: { file: this.shownPath, problems: lines },
    });
  }

  private locate(path: readonly PropertyKey[], atKey: boolean): Position {
    let node: unknown = this.doc.contents;
    let found = node;
    for (const [index, segment] of path.entries()) {
      const last = index === path.length - 1;
      if (isMap(node)) {
        const pair = node.items.find((p) => isPair(p) && keyText(p.key) === String(segment));
        if (pair === undefined) break;
        node = last && atKey ? pair.key : (pair.value ?? pair.key);
      } else if (isSeq(node) && typeof segment === 'number') {
        node = node.items[segment];
        if (node === undefined) break;
      } else {
        break;
      }
      found = node;
    }
    const offset = rangeStart(found);
    return offset === undefined ? { line: 1, col: 1 } : this.lines.linePos(offset);
  }
}

function keyText(key: unknown): string {
  return isScalar(key) ? String(key.value) : String(key);
}

function rangeStart(node: unknown): number | undefined {
  const range = (node as { range?: readonly number[] | null } | null | undefined)?.range;
  return range?.[0];
}

/** `agents[0].tool_policy.on_indeterminate`; odd keys quoted: `models["my model"]`. */
export function pathText(path: readonly PropertyKey[]): string {
  let text = '';
  for (const segment of path) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(String(segment)))
      text += `${text === '' ? '' : '.'}${String(segment)}`;
    else text += `[${JSON.stringify(String(segment))}]`;
  }
  return text;
}
