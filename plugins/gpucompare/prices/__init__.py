"""Prices: the price and exchange-rate history (shipped tables and the lake's), published figures."""
