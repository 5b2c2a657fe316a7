"""``mtmc.verifyKernel``: verify the current text on demand (server/verification.py does the work)."""

from __future__ import annotations

from pygls.exceptions import JsonRpcInvalidParams

from ..app import MtmcLanguageServer
from ..steps import verification_json
from ..trust import refuse_untrusted
from ..verification import publish_report, run_verification, settle


def register(server) -> None:
    @server.command("mtmc.verifyKernel")
    async def verify_kernel(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, kernelName?]: verify the current text against the last accepted step (or the original)."""
        if not args or not isinstance(args[0], str):
            raise JsonRpcInvalidParams("mtmc.verifyKernel takes [uri, kernelName?]")
        uri = args[0]
        kernel = args[1] if len(args) > 1 and isinstance(args[1], str) else None
        document = ls.workspace.get_text_document(uri)
        text, version = document.source, document.version
        if not ls.trusted:
            reason = refuse_untrusted(ls, "Verify Kernel")
            return {"state": "skipped", "status": "untrusted", "message": reason, "version": version}
        baseline = ls.steps.baseline(uri)
        report = await run_verification(ls, uri, text, baseline, kernel, f"Verifying {kernel or 'the file'}")
        await settle(ls, uri)
        publish_report(ls, uri, text, kernel, report)
        result = verification_json(report)
        result["version"] = version
        return result
