-- Health of a Clusternet HelmRelease (one chart in one cluster) from its Helm release status:
-- deployed is Healthy, failed is Degraded, anything else (pending-install, pending-upgrade, ...)
-- Progressing. Uses only Lua's base and table libraries (Argo CD's sandbox).
local hs = { status = "Progressing", message = "Waiting for the release" }
if obj.status == nil or obj.status.phase == nil then
  return hs
end
local said = obj.status.description or ""
if obj.status.phase == "deployed" then
  hs.status = "Healthy"
elseif obj.status.phase == "failed" then
  hs.status = "Degraded"
end
hs.message = "Release " .. obj.status.phase
if said ~= "" then
  hs.message = hs.message .. ": " .. said
end
return hs
