"""Helpers the page templates call: source highlighting and the narration's markup."""
