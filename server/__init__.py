"""The pygls language server: one module per LSP feature, on top of mtmc_lsp.optimizer."""
