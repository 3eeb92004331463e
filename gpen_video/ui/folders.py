"""The folders the desk was given, and the only places it reads or writes: every path a request
names is resolved (symlinks followed) and refused unless it lies inside one of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import OutsideFolders, UsageError
from ..media.images import IMAGE_EXTENSIONS
from ..pipeline.batch import VIDEO_EXTENSIONS


@dataclass(frozen=True)
class Folders:
    """The given folders, resolved; a file is named to the page as ``ROOT_INDEX/relative/path``."""

    roots: tuple[Path, ...]

    @classmethod
    def of(cls, paths: list[str | Path]) -> Folders:
        roots = []
        for path in paths:
            root = Path(path).expanduser().resolve()
            if not root.is_dir():
                raise UsageError(f"not a folder: {path}")
            roots.append(root)
        if not roots:
            raise UsageError("give the folders whose videos and photos the desk shows")
        return cls(tuple(roots))

    def name_of(self, path: Path) -> str:
        """The page's name for ``path``, a file inside one of the folders."""
        resolved = path.resolve()
        for index, root in enumerate(self.roots):
            if resolved.is_relative_to(root):
                return f"{index}/{resolved.relative_to(root).as_posix()}"
        raise OutsideFolders(f"{path} is outside the desk's folders")

    def holds(self, path: Path) -> bool:
        """Whether ``path`` lies inside one of the folders."""
        resolved = path.resolve()
        return any(resolved.is_relative_to(root) for root in self.roots)

    def resolve(self, name: str) -> Path:
        """The path the page's ``name`` stands for, refused unless it stays inside its folder
        (``..``, absolute parts and symlinks that lead out are all caught after resolving)."""
        index, _, relative = name.partition("/")
        if not index.isdigit() or int(index) >= len(self.roots) or not relative:
            raise OutsideFolders(f"no such file in the desk's folders: {name}")
        root = self.roots[int(index)]
        resolved = (root / relative).resolve()
        if not resolved.is_relative_to(root):
            raise OutsideFolders(f"{name} leads outside the desk's folders")
        return resolved

    def media(self) -> list[Path]:
        """Every video and photo in the folders and their subfolders, by folder then name;
        hidden files and folders (a dot first, as work files are) left out."""
        found = []
        for root in self.roots:
            for path in sorted(root.rglob("*")):
                relative = path.relative_to(root)
                if any(part.startswith(".") for part in relative.parts):
                    continue
                if path.is_file() and path.suffix.lower() in VIDEO_EXTENSIONS | IMAGE_EXTENSIONS:
                    if path.resolve().is_relative_to(root):
                        found.append(path)
        return found
