type Env = Readonly<Record<string, string | undefined>>;

/**
 * `${VAR}` in a configuration value, taken from the environment (so a secret in a header or a
 * server's environment never has to be written in the file). A variable that is not set, or is
 * empty, is returned as `missing` for the caller to report where it was used.
 */
export function expandEnv(
  value: string,
  env: Env,
): { readonly value: string } | { readonly missing: string } {
  let missing: string | undefined;
  const expanded = value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_match, name: string) => {
    const found = env[name];
    if (found === undefined || found === '') missing ??= name;
    return found ?? '';
  });
  return missing === undefined ? { value: expanded } : { missing };
}
