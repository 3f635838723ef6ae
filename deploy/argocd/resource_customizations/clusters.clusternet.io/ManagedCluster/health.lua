-- Health of a Clusternet ManagedCluster from its Ready condition (its agent reports and the
-- child is healthy): True is Healthy, False or Unknown (the agent stopped reporting) Degraded, no
-- condition yet Progressing. Uses only Lua's base and table libraries (Argo CD's sandbox).
local hs = { status = "Progressing", message = "Waiting for the cluster's first report" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    if c.status == "True" then
      hs.status = "Healthy"
    else
      hs.status = "Degraded"
    end
    hs.message = c.message
    return hs
  end
end
return hs
