"""The core: value types, the error tree, attempt records, the provider contract, a failure's meaning."""
