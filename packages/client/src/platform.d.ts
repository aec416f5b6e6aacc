// The host APIs src/*.ts rely on besides ES2022 (every browser, Node >= 18, Deno and Bun have
// them). Used only by tsconfig.src.json, which checks src without the DOM lib.
declare function setTimeout(handler: () => void, timeout?: number): unknown;
declare function clearTimeout(id: unknown): void;
declare function queueMicrotask(callback: () => void): void;
declare class TextEncoder {
  encode(input?: string): Uint8Array<ArrayBuffer>;
}
declare class TextDecoder {
  constructor(label?: string, options?: { fatal?: boolean });
  decode(input?: Uint8Array): string;
}
declare function atob(data: string): string;
