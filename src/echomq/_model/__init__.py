"""Pure data and rules: no trio, no redis."""
