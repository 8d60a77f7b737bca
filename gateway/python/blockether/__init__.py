"""Namespace package root for the Blockether SDKs."""
