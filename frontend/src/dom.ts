// The page's fixed elements (index.html), looked up once at start.

export function el<T extends HTMLElement>(id: string): T {
  const e = document.getElementById(id);
  if (!e) throw new Error(`#${id} missing from index.html`);
  return e as T;
}

export interface Dom {
  tabsEl: HTMLElement;
  termsEl: HTMLElement;
  emptyEl: HTMLElement;
  connEl: HTMLElement;
  connText: HTMLElement;
  detachedToggle: HTMLButtonElement;
  detachedCount: HTMLElement;
  detachedPanel: HTMLElement;
  detachedList: HTMLUListElement;
  detachedEmpty: HTMLElement;
  searchForm: HTMLFormElement;
  searchInput: HTMLInputElement;
  toastEl: HTMLElement;
  signinEl: HTMLElement;
  signinWhy: HTMLElement;
  signinForm: HTMLFormElement;
  signinToken: HTMLInputElement;
  signinError: HTMLElement;
  helpEl: HTMLElement;
  settingsEl: HTMLElement;
  keybarEl: HTMLElement;
  shareBadge: HTMLElement;
  confirmEl: HTMLElement;
  confirmText: HTMLElement;
}

export function lookupDom(): Dom {
  return {
    tabsEl: el('tabs'),
    termsEl: el('terms'),
    emptyEl: el('empty'),
    connEl: el('conn'),
    connText: el('conn-text'),
    detachedToggle: el('detached-toggle'),
    detachedCount: el('detached-count'),
    detachedPanel: el('detached-panel'),
    detachedList: el('detached-list'),
    detachedEmpty: el('detached-empty'),
    searchForm: el('search'),
    searchInput: el('search-input'),
    toastEl: el('toast'),
    signinEl: el('signin'),
    signinWhy: el('signin-why'),
    signinForm: el('signin-form'),
    signinToken: el('signin-token'),
    signinError: el('signin-error'),
    helpEl: el('help'),
    settingsEl: el('settings'),
    keybarEl: el('keybar'),
    shareBadge: el('share-badge'),
    confirmEl: el('confirm'),
    confirmText: el('confirm-text'),
  };
}
