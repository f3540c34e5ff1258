"""The dashboards, one module each, written in the words of `vocabulary` (the selections,
a query, the panel kinds, the dashboard frame, its variables and annotations). Each
module's one public function builds its dashboard; its panels come in groups, in the order
they take on the grid. `dashboards.generate` lists them and writes the JSON."""
