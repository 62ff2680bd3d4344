"""A plugin that fails to load: quarry must name it and go on."""

raise ImportError("this plugin needs a package that is not installed (on purpose)")
